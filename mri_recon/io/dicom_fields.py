"""Patient, study and series fields for DICOM output, taken from an ISMRMRD XML header and made valid.

Every string from a file is cleaned before it enters a data element: control characters and DICOM's value
delimiter (backslash) are dropped, the text is cut to its value representation's length, dates and times
must be digits of the right form (else left empty), and a UID from the header is used only when it is a
valid DICOM UID, whole (else a fresh one is generated, and the log says so). Text is written as Unicode
(``SpecificCharacterSet`` ISO_IR 192, UTF-8). Nothing is evaluated.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from ..errors import printable

log = logging.getLogger("mri_recon.io")

MAX_LENGTH = {"PN": 64, "LO": 64, "SH": 16, "CS": 16, "LT": 10240}
"""Longest value of each value representation used here (PS3.5 table 6.2-1)."""
_DATE = re.compile(r"^(\d{4})-?(\d{2})-?(\d{2})")
_TIME = re.compile(r"^(\d{2}):?(\d{2}):?(\d{2})(\.\d{1,6})?")
_UID = re.compile(r"^(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))*$")
_POSITIONS = {"HFP", "HFS", "HFDR", "HFDL", "FFDR", "FFDL", "FFP", "FFS", "LFP", "LFS", "RFP", "RFS", "AFDR",
              "AFDL", "PFDR", "PFDL"}


def clean(value: Any, vr: str) -> str:
    """``value`` as text fit for a data element of ``vr``: printable, no backslash, at most its length; CS also
    upper case of ``A-Z 0-9 _`` and space only."""
    if value is None:
        return ""
    text = "".join(ch for ch in str(getattr(value, "value", value)) if ch.isprintable() and ch != "\\").strip()
    if vr == "CS":
        text = re.sub(r"[^A-Z0-9_ ]", "", text.upper())
    if vr == "PN":
        text = text.replace("=", " ")  # component-group delimiter
    return text[: MAX_LENGTH.get(vr, 64)].strip()


def date(value: Any) -> str:
    """``YYYYMMDD`` from ``YYYY-MM-DD`` / ``YYYYMMDD`` text (an ``XmlDate`` too), else empty."""
    match = _DATE.match(clean(value, "LO"))
    if match is None:
        return ""
    year, month, day = (int(g) for g in match.groups())
    return f"{year:04d}{month:02d}{day:02d}" if 1 <= month <= 12 and 1 <= day <= 31 else ""


def time(value: Any) -> str:
    """``HHMMSS[.ffffff]`` from ``HH:MM:SS`` text, else empty."""
    match = _TIME.match(clean(value, "LO"))
    if match is None:
        return ""
    hours, minutes, seconds = (int(g) for g in match.groups()[:3])
    if hours > 23 or minutes > 59 or seconds > 60:
        return ""
    return f"{hours:02d}{minutes:02d}{seconds:02d}{match.group(4) or ''}"


def valid_uid(value: Any) -> str | None:
    """``value`` when it is a valid DICOM UID (digits and dots, no leading zeros, at most 64 characters, the
    whole of it: a longer one is invalid, never cut)."""
    if value is None:
        return None
    text = str(getattr(value, "value", value)).strip()
    return text if text and len(text) <= 64 and _UID.match(text) else None


def decimal(value: Any) -> str:
    """A DS (decimal string, at most 16 characters) for a finite number, else empty."""
    try:
        number = float(getattr(value, "value", value))
    except (TypeError, ValueError):
        return ""
    if number != number or number in (float("inf"), float("-inf")):
        return ""
    for digits in range(10, 0, -1):
        text = f"{number:.{digits}g}"
        if len(text) <= 16:
            return text
    return ""


def header_fields(header: Any) -> dict[str, Any]:
    """DICOM keywords and cleaned values from a parsed ISMRMRD header (``ismrmrd.xsd.ismrmrdHeader``); the
    fields a header lacks are left out."""
    if header is None:
        return {}
    subject = getattr(header, "subjectInformation", None)
    study = getattr(header, "studyInformation", None)
    series = getattr(header, "measurementInformation", None)
    system = getattr(header, "acquisitionSystemInformation", None)
    sequence = getattr(header, "sequenceParameters", None)
    conditions = getattr(header, "experimentalConditions", None)
    get = getattr
    found: dict[str, Any] = {
        "PatientName": clean(get(subject, "patientName", None), "PN"),
        "PatientID": clean(get(subject, "patientID", None), "LO"),
        "PatientBirthDate": date(get(subject, "patientBirthdate", None)),
        "PatientSex": {"M": "M", "F": "F", "O": "O"}.get(clean(get(subject, "patientGender", None), "CS"), ""),
        "StudyDate": date(get(study, "studyDate", None)),
        "StudyTime": time(get(study, "studyTime", None)),
        "StudyID": clean(get(study, "studyID", None), "SH"),
        "AccessionNumber": clean(get(study, "accessionNumber", None), "SH"),
        "ReferringPhysicianName": clean(get(study, "referringPhysicianName", None), "PN"),
        "StudyDescription": clean(get(study, "studyDescription", None), "LO"),
        "BodyPartExamined": clean(get(study, "bodyPartExamined", None), "CS"),
        "SeriesDate": date(get(series, "seriesDate", None)),
        "SeriesTime": time(get(series, "seriesTime", None)),
        "ProtocolName": clean(get(series, "protocolName", None), "LO"),
        "SequenceName": clean(get(series, "sequenceName", None), "SH"),
        "SeriesDescription": clean(get(series, "seriesDescription", None), "LO"),
        "Manufacturer": clean(get(system, "systemVendor", None), "LO"),
        "ManufacturerModelName": clean(get(system, "systemModel", None), "LO"),
        "InstitutionName": clean(get(system, "institutionName", None), "LO"),
        "StationName": clean(get(system, "stationName", None), "SH"),
        "MagneticFieldStrength": decimal(get(system, "systemFieldStrength_T", None)),
    }
    position = clean(get(series, "patientPosition", None), "CS")
    if position in _POSITIONS:
        found["PatientPosition"] = position
    frequency = decimal(float(get(conditions, "H1resonanceFrequency_Hz", 0) or 0) / 1e6) if conditions else ""
    if frequency and frequency != "0":
        found["ImagingFrequency"] = frequency
    for keyword, name in (("RepetitionTime", "TR"), ("EchoTime", "TE"), ("InversionTime", "TI"),
                          ("FlipAngle", "flipAngle_deg")):
        values = get(sequence, name, None) or []
        first = decimal(values[0]) if len(values) else ""
        if first:
            found[keyword] = first
    for keyword, uid in (("StudyInstanceUID", get(study, "studyInstanceUID", None)),
                         ("FrameOfReferenceUID", get(series, "frameOfReferenceUID", None))):
        if valid_uid(uid):
            found[keyword] = valid_uid(uid)
        elif uid is not None:
            log.info("the header's %s %r is not a valid DICOM UID; the series gets a fresh one", keyword,
                     printable(str(uid)[:100]))
    number = get(series, "initialSeriesNumber", None)
    if isinstance(number, int) and 0 <= number < 2**31:
        found["SeriesNumber"] = number
    return {k: v for k, v in found.items() if v not in ("", None)}


def scan_header(attrs: Mapping[str, Any], source: str, dataset: str = "dataset") -> Any:
    """The parsed ISMRMRD header of a scan read from MRD (None for other inputs, or when it cannot be read)."""
    if attrs.get("source_format") != "ismrmrd":
        return None
    from .mrd_image import read_header_xml  # noqa: PLC0415 - the ismrmrd package on use

    try:
        import ismrmrd.xsd  # noqa: PLC0415

        return ismrmrd.xsd.CreateFromDocument(read_header_xml(source, dataset).decode("utf-8", "replace"))
    except Exception:  # noqa: BLE001 - the header was parsed on reading; a failure here only loses the names
        return None

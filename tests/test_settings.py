"""One settings object: ReconSettings, and what is derived from it (the CLI's options, the API's keywords, the
batch's record), one reconstruct_file for the CLI and the batch, and the input and output registries."""

from __future__ import annotations

import inspect
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import mri_recon
from mri_recon import api
from mri_recon.cli import main
from mri_recon.cli.options import param_name, settings_from
from mri_recon.errors import InvalidDataError
from mri_recon.io import readers, writers
from mri_recon.io.inputs import InputFormat
from mri_recon.io.stack import DIMENSIONS
from mri_recon.operators.engines import methods
from mri_recon.prep.maps_methods import choices as coil_map_choices
from mri_recon.settings import API_FIELDS, FIELDS, ReconSettings, allowed, default_of, option_of
from mri_recon.sim.simulate import simulate_scan
from mri_recon.solvers import regularizers
from mri_recon.solvers.sparse import solver_names


@pytest.fixture(scope="module")
def scan_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("scans") / "s.h5"
    mri_recon.save_scan(path, simulate_scan((20, 18), "golden", coils=2, spokes=14, seed=7))
    return path


def test_the_api_signature_is_the_settings():
    parameters = inspect.signature(mri_recon.reconstruct).parameters
    settings = [name for name in parameters if name in FIELDS]
    assert tuple(settings) == API_FIELDS
    assert set(parameters) - set(FIELDS) == {"scan", *api.RUNTIME}
    fields = ReconSettings.__dataclass_fields__
    for name in API_FIELDS:
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert parameters[name].default == default_of(name), name
        assert parameters[name].annotation == fields[name].type, name


@pytest.mark.parametrize("call", [
    lambda scan: mri_recon.reconstruct(scan, iters=3),
    lambda scan: api.prepare_and_reconstruct(scan, iters=3),
    lambda scan: ReconSettings.from_keywords({"iters": 3}, "reconstruct"),
    lambda scan: ReconSettings().replace(iters=3),
], ids=["reconstruct", "prepare_and_reconstruct", "from_keywords", "replace"])
def test_a_misspelled_keyword_is_refused_with_the_valid_ones(call):
    scan = simulate_scan((16, 16), "golden", coils=1, spokes=8, seed=1)
    with pytest.raises(InvalidDataError, match=r"unexpected keyword argument 'iters' \(did you mean 'iterations'\?\);"
                                               r" valid: .*iterations.*lam"):
        call(scan)
    with pytest.raises(InvalidDataError, match=r"unexpected keyword argument 'zzz'; valid: "):
        ReconSettings.from_keywords({"zzz": 1})


@pytest.mark.parametrize("changes,message", [
    ({"iterations": 0}, "iterations must be a whole number >= 1 and <= 10000, found 0"),
    ({"iterations": 2.5}, "iterations must be a whole number >= 1"),
    ({"iterations": True}, "iterations must be a whole number"),
    ({"lam": float("nan")}, "lam must be a finite number >= 0, found nan"),
    ({"rho": 0.0}, "rho must be a positive finite number, found 0.0"),
    ({"regularizer": "l7"}, f"regularizer must be one of {', '.join(regularizers.names())}, found 'l7'"),
    ({"solver": "newton"}, f"solver must be one of {', '.join(solver_names())}, found 'newton'"),
    ({"method": "gpu"}, f"method must be one of {', '.join(methods())}, found 'gpu'"),
    ({"format": "png"}, f"format must be one of {', '.join(writers.formats())}, found 'png'"),
    ({"coil_maps": "pca"}, f"coil_maps must be one of {', '.join(coil_map_choices())}, found 'pca'"),
    ({"prewhiten": "yes"}, "prewhiten must be True or False, found 'yes'"),
    ({"choice": {"slices": 1}}, r"choice takes slice, contrast, phase, set, repetition; found \['slices'\]"),
    ({"choice": {"slice": -1}}, "choice: slice must be a whole number >= 0, found -1"),
], ids=lambda v: str(v)[:30])
def test_each_setting_is_checked(changes, message):
    with pytest.raises(InvalidDataError, match=message):
        ReconSettings(**changes)


def test_the_choice_drops_unset_indices_and_the_record_leaves_out_how_it_ran():
    settings = ReconSettings(choice={"slice": 1, "phase": None}, device="cpu", cache_dir=Path("/tmp/x"))
    assert settings.choice == {"slice": 1} and settings.cache_dir == "/tmp/x"
    record = settings.record()
    assert record["choice"] == {"slice": 1} and record["format"] == "hdf5" and record["lam"] == 1e-3
    assert not {"device", "cache", "cache_dir", "allow_external"} & set(record)
    assert ReconSettings(**settings.keywords()) == settings


def test_the_commands_options_are_the_settings():
    params = {p.name: p for p in main.get_command(None, "reconstruct").params}
    for name in FIELDS:
        spec = option_of(name)
        if spec.kind is dict:
            assert all(params[f"{d}_"].opts == [f"--{d}"] for d in DIMENSIONS)
            continue
        param = params[param_name(name)]
        assert param.help == spec.help, name
        if not spec.flag and spec.kind is not bool:
            assert param.default == default_of(name), name
            if spec.choices is not None:
                assert tuple(param.type.choices) == allowed(spec), name
    context = main.get_command(None, "reconstruct").make_context("reconstruct", ["scan.h5"])
    assert settings_from(context.params) == ReconSettings()
    given = main.get_command(None, "reconstruct").make_context("reconstruct", [
        "scan.h5", "--no-prewhiten", "--no-field-map", "--no-cache", "--lambda", "0.5", "--slice", "2",
        "--format", "nifti", "--complex", "--cache-dir", "c", "--allow-external-data"])
    assert settings_from(given.params) == ReconSettings(prewhiten=False, field_map="ignore", cache=False, lam=0.5,
                                                        choice={"slice": 2}, format="nifti", complex_=True,
                                                        cache_dir="c", allow_external=True)


def test_reconstruct_file_writes_what_the_api_and_the_cli_give(scan_file, tmp_path):
    settings = ReconSettings(iterations=4, device="cpu", cache=False)
    done = api.reconstruct_file(scan_file, tmp_path / "f.h5", settings)
    api_image = mri_recon.reconstruct(mri_recon.load_scan(scan_file), iterations=4, device="cpu").image
    result = CliRunner().invoke(main, ["reconstruct", str(scan_file), "-o", str(tmp_path / "c.h5"),
                                       "--iterations", "4", "--device", "cpu", "--no-cache", "-q"])
    assert result.exit_code == 0, result.output
    with h5py.File(tmp_path / "f.h5") as f, h5py.File(tmp_path / "c.h5") as c:
        assert np.array_equal(f["image"][()], api_image) and np.array_equal(c["image"][()], api_image)
    assert done.written == [tmp_path / "f.h5"] and len(done.results) == 1
    seen = []
    api.reconstruct_file(scan_file, None, settings, on_load=lambda images: seen.append(len(images)),
                         on_image=lambda i, key, scan: seen.append((i, key)), on_done=lambda r: seen.append("done"))
    assert seen == [1, (0, {}), "done"]


def test_an_input_format_is_one_registry_entry(scan_file, tmp_path, monkeypatch):
    scan = mri_recon.load_scan(scan_file)
    path = tmp_path / "s.npz"
    np.savez(path, kspace=scan.kspace, trajectory=scan.trajectory, matrix=np.array(scan.matrix))

    def load(probe, **options):
        del options
        with np.load(probe.path) as f:
            return mri_recon.Scan(kspace=f["kspace"], trajectory=f["trajectory"], matrix=tuple(f["matrix"]))

    npz = InputFormat("npz", (".npz",), lambda probe: str(probe.path).endswith(".npz"),
                      lambda probe, **options: [({}, load(probe, **options))], load)
    monkeypatch.setattr(readers, "INPUTS", (npz, *readers.INPUTS))
    assert np.array_equal(mri_recon.load_scan(path).kspace, scan.kspace)
    assert ".npz" in readers.scan_suffixes() and mri_recon.load_scans(scan_file)[0][1].matrix == scan.matrix


def test_reconstruct_file_reads_the_chosen_images(tmp_path):
    from mri_recon.io.ismrmrd_write import write_ismrmrd

    scans = [({"slice": s}, simulate_scan((16, 16), "golden", coils=1, spokes=10, seed=s)) for s in (0, 1, 2)]
    path = tmp_path / "three.mrd.h5"
    write_ismrmrd(path, [(key, scan.replace(coil_maps=None, ground_truth=None)) for key, scan in scans])
    settings = ReconSettings(iterations=2, device="cpu", cache=False, choice={"slice": 1})
    done = api.reconstruct_file(path, tmp_path / "one.h5", settings)
    assert [key["slice"] for key, *_ in done.results] == [1]
    every = api.reconstruct_file(path, None, settings.replace(choice={}), keys=[{**done.results[0][0]}])
    assert np.array_equal(every.results[0][3].image, done.results[0][3].image) and every.written == []
    with pytest.raises(InvalidDataError, match="a schema-v1 file holds one image; slice=1 chooses"):
        api.reconstruct_file(_schema_file(tmp_path), None, settings)


def _schema_file(tmp_path):
    path = tmp_path / "schema.h5"
    mri_recon.save_scan(path, simulate_scan((16, 16), "golden", coils=1, spokes=10, seed=4))
    return path


def test_a_solver_option_reaches_every_solver():
    """``check_every``, a field of the settings handed to the solver as it is: the sparse solvers and the joint
    time series record their objective at every check and at the end."""
    from mri_recon.sim.dynamic import simulate_series

    scan = mri_recon.simulate_scan((24, 24), "golden", coils=2, spokes=20, seed=4)
    every4 = mri_recon.reconstruct(scan, regularizer="tv", iterations=12, check_every=4, device="cpu")
    default = mri_recon.reconstruct(scan, regularizer="tv", iterations=12, device="cpu")
    assert len(every4.residuals) == 1 + 3 and len(default.residuals) == 1 + 2  # checks at 10 and 12
    assert np.array_equal(every4.image, default.image)  # checks read, they do not steer
    series = simulate_series((16, 16), frames=3, spokes_per_frame=6, coils=2, seed=5)
    joint = mri_recon.reconstruct(series, temporal="tv", iterations=6, check_every=2, device="cpu")
    assert len(joint.residuals) == 1 + 3
    with pytest.raises(InvalidDataError, match="check_every must be a whole number >= 1"):
        mri_recon.reconstruct(scan, check_every=0)


@pytest.mark.parametrize("given", ["scan.h5", Path("scan.h5"), {"kspace": 1}, None])
def test_reconstruct_names_what_it_takes_when_given_something_else(given):
    """A file's name (a natural first try) or any other object: one line naming a Scan or a TimeSeries, with the
    way to read a file for a name, not an AttributeError from deep inside."""
    hint = r" \(a file: mri_recon\.load_scan\(path\), or reconstruct_file\(path, output\)\)"
    name = type(given).__name__
    match = rf"^reconstruct takes a Scan or a TimeSeries, not {name}" + (hint if "scan" in str(given) else "$")
    with pytest.raises(InvalidDataError, match=match):
        mri_recon.reconstruct(given, device="cpu")

"""Off-resonance correction (docs/offres.md): the model and its exact engine (:mod:`.model`), its CUDA launchers
(:mod:`.gpu_offres`, :mod:`.gpu_offres_tc` on the tensor cores), time segmentation (:mod:`.time_segments`: the
fit; :mod:`.segmented`: the encoding over any plain engine and its normal operators; :mod:`.gpu_segments`: the
fused GPU normal operator), the choice in a reconstruction (:mod:`.setup`) and the public functions
(:mod:`.public`: :func:`fhd_offres`, :func:`forward_offres`)."""

CORRECTIONS = ("auto", "exact", "segmented")
"""The ways of correcting off-resonance in a reconstruction (``ReconSettings.correction``; chosen by
:func:`.setup.plan_correction`)."""

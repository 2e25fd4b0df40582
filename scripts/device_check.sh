#!/usr/bin/env bash
# Everything that needs a GPU, in one go: GPU tests, `mri-recon doctor` and the benchmarks.
# Results (JSON and logs) land in $OUT (default ./out). Peer packages missing on the GPU machine are
# installed from wheels in .whl/ when that folder is present.
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # absolute: the base-tree steps write into it from another folder
export PYTHONUNBUFFERED=1
SITE=
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site && SITE=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export MRI_RECON_CACHE_DIR=/tmp/mri-recon-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv >"$OUT/gpu.txt" 2>&1
python3 -c "import cupy, numpy, sys; print(sys.version); print('cupy', cupy.__version__, 'numpy', numpy.__version__)" >>"$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
steps=${STEPS:-"tests doctor fhd filter recon ismrmrd cost nufft recon3d128 recon3d256 cs cs3d128 offres offres_quality"}
for step in $steps; do
  echo "=== $step"
  case $step in
    tests) timeout ${T_TESTS:-300} python3 -m pytest -m gpu -q -p no:cacheprovider -rfE ${TEST_ARGS:-} 2>&1 | tee "$OUT/pytest_gpu.log" | tail -60 ;;
    doctor) timeout ${T_DOCTOR:-120} python3 -m mri_recon.cli doctor 2>&1 | tee "$OUT/doctor.txt" ;;
    fhd) timeout ${T_FHD:-300} python3 scripts/bench_fhd.py "$OUT/bench_fhd.json" 2>&1 | tail -40 ;;
    filter) timeout ${T_FILTER:-200} python3 scripts/bench_filter.py "$OUT/bench_filter.json" 2>&1 | tail -30 ;;
    recon) timeout ${T_RECON:-300} python3 scripts/bench_recon.py "$OUT/bench_recon.json" --data .benchdata/recon_256.h5 2>&1 | tail -30 ;;
    ismrmrd) timeout ${T_ISMRMRD:-200} python3 scripts/bench_ismrmrd.py "$OUT/bench_ismrmrd.json" 2>&1 | tail -15 ;;
    cost) timeout ${T_COST:-240} python3 scripts/bench_cost.py "$OUT/bench_cost.json" 2>&1 | tail -45 ;;
    nufft) timeout ${T_NUFFT:-240} python3 scripts/bench_nufft.py "$OUT/bench_nufft.json" 2>&1 | tail -30 ;;
    recon3d128) timeout ${T_RECON3D:-300} python3 scripts/bench_recon.py "$OUT/bench_recon_3d128.json" --problem 3d128 --repeats 3 2>&1 | tail -12 ;;
    cold) timeout ${T_COLD:-400} python3 scripts/cold_start.py "$OUT/cold_start.json" --scan .benchdata/recon_256.h5 ${COLD_METHODS:---method auto --method exact} --repeats ${COLD_REPEATS:-2} ${COLD_ARGS:-} 2>&1 | tail -10 ;;
    offres) timeout ${T_OFFRES:-540} python3 scripts/bench_offres.py "$OUT/bench_offres.json" ${OFFRES_ARGS:-} 2>&1 | tail -20 ;;
    offres_quality) timeout ${T_OFFRES:-540} python3 scripts/offres_quality.py "$OUT/offres_quality_gpu.json" --device gpu --png "$OUT/offres_spiral_gpu.png" 2>&1 | tail -25 ;;
    batch) timeout ${T_BATCH:-400} python3 scripts/bench_batch.py "$OUT/bench_batch_h200.json" --scans 32 --matrix 256 --coils 8 --device gpu --workers ${BATCH_WORKERS:-1} --repeats ${BATCH_REPEATS:-3} ${BATCH_ARGS:-} 2>&1 | tail -20 ;;
    recon3d256) timeout ${T_RECON3D:-300} python3 scripts/bench_recon.py "$OUT/bench_recon_3d256.json" --problem 3d256 --repeats 2 --sigpy-repeats 1 2>&1 | tail -12 ;;
    cs) timeout ${T_CS:-420} python3 scripts/bench_cs.py "$OUT/bench_cs_2d.json" --problem 2d ${CS_ARGS:-} 2>&1 | tail -12 ;;
    segfit) timeout ${T_SEGFIT:-120} python3 scripts/bench_segment_fit.py "$OUT/bench_segment_fit.json" 2>&1 | tail -8 ;;
    probe) timeout ${T_PROBE:-300} python3 scripts/batch_probe.py "$OUT/batch_probe.json" --scans ${PROBE_SCANS:-16} ${PROBE_ARGS:-} 2>&1 | tail -40 ;;
    offres_profile) timeout ${T_PROFILE:-200} python3 scripts/offres_profile.py "$OUT/offres_profile.txt" 2>&1 | tail -60 ;;
    prepare) timeout ${T_PREPARE:-540} python3 scripts/bench_prepare.py "$OUT/bench_prepare.json" --sweep ${PREPARE_ARGS:-} 2>&1 | tail -30 ;;
    cs3d128) timeout ${T_CS3D:-300} python3 scripts/bench_cs.py "$OUT/bench_cs_3d128.json" --problem 3d128 --repeats 3 2>&1 | tail -6 ;;
    profile) timeout ${T_PROFILE:-200} python3 scripts/profile_call.py "$OUT/profile_2d.txt" --problem 2d --repeats 15 2>&1 | head -9
             timeout ${T_PROFILE:-200} python3 scripts/profile_call.py "$OUT/profile_3d128.txt" --problem 3d128 --repeats 5 2>&1 | head -9 ;;
    profile_compress) for choice in ${PROFILE_COMPRESS:-none 8}; do
             timeout ${T_PROFILE:-200} python3 scripts/profile_call.py "$OUT/profile_compress_$choice.txt" --problem compress --coil-compress "$choice" --repeats 5 --steps --top 30 2>&1 | head -40
           done ;;
    series_ops) timeout ${T_PROFILE:-200} python3 scripts/profile_series_ops.py "$OUT/series_ops_128.json" --matrix 128 --frames 20 --coils 8 2>&1 | tail -30
                timeout ${T_PROFILE:-200} python3 scripts/profile_series_ops.py "$OUT/series_ops_256.json" --matrix 256 --frames 30 --coils 16 2>&1 | tail -30 ;;
    upload) timeout ${T_UPLOAD:-200} python3 scripts/bench_upload.py "$OUT/bench_upload.json" --repeats 5 2>&1 | tail -20 ;;
    product) timeout ${T_UPLOAD:-200} python3 scripts/bench_upload.py "$OUT/bench_upload_product.json" --product --repeats 5 2>&1 | tail -4 ;;
    rows1024)  # a 2x grid's last axis of 2048: the row passes (opted in to more shared memory) and the whole-grid ones
           for flag in "" --grid-passes; do
             timeout ${T_PROFILE:-200} python3 scripts/profile_call.py "$OUT/rows_1024${flag:+_grid}.txt" --problem sweep --matrix 1024x1024 --coils 8 --repeats 5 --steps --top 10 $flag 2>&1 | head -12
           done ;;
    psf_cache) timeout ${T_PSF_CACHE:-200} python3 scripts/bench_psf_cache.py "$OUT/bench_psf_cache.json" --rounds ${PSF_CACHE_ROUNDS:-25} 2>&1 | tail -4 ;;
    profile_cache)  # the README's 2D call without and with psf_cache= (issue 45)
           timeout ${T_PROFILE:-200} python3 scripts/profile_call.py "$OUT/profile_2d_nocache.txt" --problem 2d --repeats 15 --steps 2>&1 | head -12
           timeout ${T_PROFILE:-200} python3 scripts/profile_call.py "$OUT/profile_2d_cache.txt" --problem 2d --repeats 15 --steps --psf-cache /tmp/mri-recon-psf 2>&1 | head -12 ;;
    profile_series) for problem in series series256; do
             timeout ${T_PROFILE:-200} python3 scripts/profile_call.py "$OUT/profile_$problem.txt" --problem $problem --repeats 5 --steps --top 30 2>&1 | head -40
           done ;;
    passes)  # the README's calls and the time series with the row passes and with the whole-grid passes
           for problem in ${PASSES_PROBLEMS:-2d 3d128 series series256}; do
             repeats=5; [ "$problem" = 2d ] && repeats=15
             for flag in "" --grid-passes; do
               timeout ${T_PROFILE:-200} python3 scripts/profile_call.py "$OUT/passes_${problem}${flag:+_grid}.txt" --problem $problem --repeats $repeats --steps --top 20 $flag 2>&1 | head -12
             done
           done ;;
    profile_series_base)  # the same problems with the base tree's package (.base), this tree's script
           for problem in series series256; do
             (cd "${BASE_TREE:-.base}" && PYTHONPATH="$PWD${SITE:+:$SITE}" timeout ${T_PROFILE:-200} python3 ../scripts/profile_call.py "$OUT/profile_${problem}_base.txt" --problem $problem --repeats 5 --steps --top 30 2>&1 | head -30)
           done ;;
    probe_upload) timeout ${T_PROBE:-300} python3 scripts/probe_upload.py "$OUT/probe_upload.json" --repeats ${PROBE_REPEATS:-7} 2>&1 | tail -12 ;;
    profile_frame) timeout ${T_PROFILE:-200} python3 scripts/profile_call.py "$OUT/profile_frame.txt" --problem frame --repeats 20 --steps --top 30 2>&1 | head -30 ;;
    frame_ab)  # the server's frame in one process: the base tree's package (.base), this tree's, the base again
      for tree in base head base2; do
        dir=.; [ "$tree" != head ] && dir=${BASE_TREE:-.base}
        (cd "$dir" && PYTHONPATH="$PWD${SITE:+:$SITE}" timeout ${T_PROFILE:-200} python3 "$OLDPWD/scripts/profile_call.py" "$OUT/profile_frame_$tree.txt" --problem frame --repeats 30 --steps --top 30 2>&1 | head -3)
      done ;;
    walsh) timeout ${T_WALSH:-200} python3 scripts/bench_walsh.py "$OUT/bench_walsh.json" --repeats ${WALSH_REPEATS:-9} 2>&1 | tail -12 ;;
    first_call) timeout ${T_FIRST:-300} python3 scripts/first_call.py "$OUT/first_call.json" --runs ${FIRST_RUNS:-5} 2>&1 | tail -8 ;;
    public) timeout ${T_PUBLIC:-200} python3 scripts/bench_public.py --out "$OUT/bench_public.json" 2>&1 | tail -12 ;;
    frames) timeout ${T_FRAMES:-120} python3 scripts/server_frames.py --device gpu --frames 40 --tr-ms 5 --spokes 21 --matrix 128 --coils 8 --json "$OUT/server_frames_gpu.json" 2>&1 | tail -14 ;;
    hashes)  # images of the base tree (.base, unpacked from a commit by the caller) and of this tree, twice
      base=${BASE_TREE:-.base}
      (cd "$base" && PYTHONPATH="$PWD${SITE:+:$SITE}" timeout ${T_HASHES:-240} python3 scripts/image_hashes.py "$OUT/hashes_gpu_base.json" gpu --save /tmp/h_base >/tmp/h_base.log 2>&1)
      timeout ${T_HASHES:-240} python3 scripts/image_hashes.py "$OUT/hashes_gpu_head.json" gpu --save /tmp/h_head >/tmp/h_head.log 2>&1
      timeout ${T_HASHES:-240} python3 scripts/image_hashes.py "$OUT/hashes_gpu_head2.json" gpu --save /tmp/h_head2 >/tmp/h_head2.log 2>&1
      tail -3 /tmp/h_base.log /tmp/h_head.log
      python3 scripts/compare_images.py /tmp/h_head /tmp/h_base /tmp/h_head2 "$OUT/hashes_gpu_compare.json" 2>&1 | tail -25 ;;
    wholecall)  # the README's call, this tree and the base tree (.base) in turn on one machine
      timeout ${T_WHOLE:-150} python3 scripts/bench_prepare.py "$OUT/bench_prepare_head.json" --repeats ${WHOLE_REPEATS:-8} 2>&1 | tail -8
      (cd "${BASE_TREE:-.base}" && PYTHONPATH="$PWD${SITE:+:$SITE}" timeout ${T_WHOLE:-150} python3 scripts/bench_prepare.py "$OUT/bench_prepare_base.json" --repeats ${WHOLE_REPEATS:-8} 2>&1 | tail -8) ;;
    temporal) timeout ${T_TEMPORAL:-240} python3 scripts/bench_temporal.py "$OUT/bench_temporal_gpu.json" --sections gpu 2>&1 | tail -6 ;;
    nlinv) timeout ${T_NLINV:-240} python3 scripts/bench_nlinv.py --device gpu --repeats 3 --out "$OUT/bench_nlinv_gpu.json" 2>&1 | tail -4 ;;
    lowrank) timeout ${T_LOWRANK:-300} python3 scripts/bench_lowrank.py "$OUT/bench_lowrank_gpu.json" --sections beating,prox --methods tv,lowrank,llr --device gpu --weights tv=0.005 --weights lowrank=2 --weights llr=0.3 --repeats ${LOWRANK_REPEATS:-5} 2>&1 | tail -4 ;;
    compress_ab)  # this tree, the base tree (.base), this tree again: the whole call of issue 46 in one lease
      timeout ${T_COMPRESS:-150} python3 scripts/bench_coil_compress.py "$OUT/bench_coil_compress_gpu_head.json" --gpu --no-cpu --repeats ${COMPRESS_REPEATS:-11} >/dev/null 2>&1
      (cd "${BASE_TREE:-.base}" && PYTHONPATH="$PWD${SITE:+:$SITE}" timeout ${T_COMPRESS:-150} python3 ../scripts/bench_coil_compress.py "$OUT/bench_coil_compress_gpu_base.json" --gpu --no-cpu --repeats ${COMPRESS_REPEATS:-11} >/dev/null 2>&1)
      timeout ${T_COMPRESS:-150} python3 scripts/bench_coil_compress.py "$OUT/bench_coil_compress_gpu_head2.json" --gpu --no-cpu --repeats ${COMPRESS_REPEATS:-11} >/dev/null 2>&1
      for f in head base head2; do python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['gpu']['rows']; print(sys.argv[2], {k: (round(v['whole_s']*1e3,1), round(v['speedup'],2)) for k, v in r.items()})" "$OUT/bench_coil_compress_gpu_$f.json" $f; done ;;
    compress) timeout ${T_COMPRESS:-300} python3 scripts/bench_coil_compress.py "$OUT/bench_coil_compress_gpu.json" --gpu --no-cpu --repeats ${COMPRESS_REPEATS:-15} 2>&1 | tail -8 ;;
    record) timeout ${T_RECORD:-200} python3 scripts/record_cupy_kernels.py 2>&1 | tail -2 && cp mri_recon/kernels/cupy_kernels.json "$OUT/" ;;
  esac
done

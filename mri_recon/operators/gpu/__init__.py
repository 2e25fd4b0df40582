"""What the GPU launchers share: cuFFT plans (:mod:`.fft`), launch helpers (:mod:`.launch`: buffers, the
current device, checks of device arrays and launch sizes) and the list of every kernel configuration they build
(:mod:`.configurations`)."""

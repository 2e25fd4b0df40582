"""What the GPU launchers share: cuFFT plans (:mod:`.fft`) and launch helpers (:mod:`.launch`: buffers, the
current device, checks of device arrays and launch sizes)."""

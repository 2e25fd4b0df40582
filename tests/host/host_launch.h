// Launches of host-built kernels (tests/host/*_host.cpp), included after the file declares blockIdx and
// threadIdx (thread-local), blockDim, gridDim and block_barrier. run_in_turn: every thread of every block one
// after the other, exact for kernels without shared memory or barriers. run_blocks: the blocks one after the
// other, each block's threads as std::threads meeting at block_barrier for __syncthreads().
#ifndef MRI_RECON_HOST_LAUNCH_H
#define MRI_RECON_HOST_LAUNCH_H

#include <thread>
#include <vector>

static inline host_dim3 host_shape(unsigned x, unsigned y = 1)
{
    host_dim3 d;
    d.x = x;
    d.y = y;
    d.z = 1;
    return d;
}

template <class Kernel> static void run_in_turn(host_dim3 grid, host_dim3 block, Kernel kernel)
{
    gridDim = grid;
    blockDim = block;
    for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx)
            for (unsigned ty = 0; ty < block.y; ++ty)
                for (unsigned tx = 0; tx < block.x; ++tx) {
                    blockIdx = host_shape(bx, by);
                    threadIdx = host_shape(tx, ty);
                    kernel();
                }
}

template <class Kernel> static void run_blocks(host_dim3 grid, host_dim3 block, Kernel kernel)
{
    gridDim = grid;
    blockDim = block;
    block_barrier.count = block.x * block.y;
    for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
            std::vector<std::thread> threads;
            for (unsigned ty = 0; ty < block.y; ++ty)
                for (unsigned tx = 0; tx < block.x; ++tx)
                    threads.emplace_back([=, &kernel] {
                        blockIdx = host_shape(bx, by);
                        threadIdx = host_shape(tx, ty);
                        kernel();
                    });
            for (auto& thread : threads) thread.join();
        }
}

#endif  // MRI_RECON_HOST_LAUNCH_H

// Tiled correlation of a 3-D volume with a small odd filter held in __constant__ memory.
//
// Semantics: the "convolution" of Programming Massively Parallel Processors (ch. 7), which does not flip the
// filter, i.e. a correlation exactly like scipy.ndimage.correlate:
//
//     out[z][y][x] = sum_{fz,fy,fx} F[fz][fy][fx] * in[z + fz - RZ][y + fy - RY][x + fx - RX]
//
// Arrays are C-ordered (x fastest). 1-D and 2-D images run as volumes with extent 1 along the missing axes.
// Cells outside the volume ("ghost cells") are 0, or, when the argument `nearest` is non-zero, the nearest
// edge element (scipy's mode "nearest"). `batch` independent volumes of nz*ny*nx elements may follow each
// other in memory; blockIdx.x runs over tiles_x x-tiles times the batch.
//
// Compile-time sizes (-D options):
//   VARIANT      0: strategy A, 1: strategy B, 2: register-blocked tile, 3: row streaming (only that kernel
//                is compiled)
//   RX, RY, RZ   filter radii along x, y, z (the filter is (2RZ+1) x (2RY+1) x (2RX+1))
//   COMPLEX      1: elements are complex64 stored as float2 (real, imaginary); the real filter is applied to
//                both parts in the same pass, so the real and imaginary planes are filtered from one read
//   strategy A:  IN_X, IN_Y, IN_Z       block = input tile; outputs = input tile minus a radius-wide rim
//   strategy B:  TILE_X, TILE_Y, TILE_Z block = output tile; halo cells read through the L1/L2 caches
//   register:    BX, BY, BZ, PER_THREAD block of BX x BY x BZ threads, each computing PER_THREAD outputs
//                along z; input tile (with halo) in dynamic shared memory
//   streaming:   ROWS, WARPS            block of WARPS warps side by side along x, each thread owning one
//                16-byte vector of a row and walking ROWS rows down the image (2-D filters: RZ = 0)
//
// Sums are formed in three levels, one per filter axis (at most 15 terms each): a 15 x 15 x 15 filter rounds
// about like three 15-term float32 sums rather than one 3375-term sum.

#ifndef VARIANT
#define VARIANT 2
#endif
#ifndef RX
#define RX 1
#endif
#ifndef RY
#define RY 1
#endif
#ifndef RZ
#define RZ 0
#endif
#ifndef COMPLEX
#define COMPLEX 0
#endif

#define FX (2 * RX + 1)
#define FY (2 * RY + 1)
#define FZ (2 * RZ + 1)
#define FILTER_TAPS (FZ * FY * FX)

static_assert(RX >= 0 && RY >= 0 && RZ >= 0, "filter radii must be >= 0");

__constant__ float c_filter[FILTER_TAPS];

#if COMPLEX
typedef float2 elem_t;
__device__ __forceinline__ elem_t elem_zero() { return make_float2(0.0f, 0.0f); }
__device__ __forceinline__ elem_t elem_fma(float w, elem_t v, elem_t acc)
{
    return make_float2(fmaf(w, v.x, acc.x), fmaf(w, v.y, acc.y));
}
__device__ __forceinline__ elem_t elem_add(elem_t a, elem_t b) { return make_float2(a.x + b.x, a.y + b.y); }
#else
typedef float elem_t;
__device__ __forceinline__ elem_t elem_zero() { return 0.0f; }
__device__ __forceinline__ elem_t elem_fma(float w, elem_t v, elem_t acc) { return fmaf(w, v, acc); }
__device__ __forceinline__ elem_t elem_add(elem_t a, elem_t b) { return a + b; }
#endif

__device__ __forceinline__ float filter_tap(int fz, int fy, int fx)
{
    return c_filter[(fz * FY + fy) * FX + fx];
}

__device__ __forceinline__ long long volume_index(int x, int y, int z, int nx, int ny)
{
    return ((long long)z * ny + y) * nx + x;
}

// Element (x, y, z) of the volume, or its ghost value when it lies outside.
__device__ __forceinline__ elem_t load_ghost(const elem_t* __restrict__ in, int x, int y, int z,
                                             int nx, int ny, int nz, int nearest)
{
    if (nearest) {
        x = min(max(x, 0), nx - 1);
        y = min(max(y, 0), ny - 1);
        z = min(max(z, 0), nz - 1);
    } else if ((unsigned)x >= (unsigned)nx || (unsigned)y >= (unsigned)ny || (unsigned)z >= (unsigned)nz) {
        return elem_zero();
    }
    return __ldg(in + volume_index(x, y, z, nx, ny));
}

// Strategies A and B unroll the outer filter loops only for small filters: fully unrolled 9 x 9 x 9 loops
// take NVRTC tens of seconds. (The argument of "#pragma unroll" is not macro-expanded, hence constexpr.)
#if VARIANT == 0 || VARIANT == 1
constexpr int conv_unroll_y = (FY * FX <= 81) ? FY : 1;
constexpr int conv_unroll_z = (FILTER_TAPS <= 125) ? FZ : 1;
#endif

#if VARIANT == 0
#ifndef IN_X
#define IN_X 32
#define IN_Y 32
#define IN_Z 1
#endif
// ---------------------------------------------------------------------------------------------------------
// Strategy A (the book's tiled kernel): the block is the input tile, IN = OUT + 2r per axis. Every thread
// loads one element (ghost cells included), then the outer rim of threads is deactivated and the others
// compute one output each from shared memory only.
#define OUT_X (IN_X - 2 * RX)
#define OUT_Y (IN_Y - 2 * RY)
#define OUT_Z (IN_Z - 2 * RZ)
static_assert(OUT_X > 0 && OUT_Y > 0 && OUT_Z > 0, "strategy A: the input tile must exceed 2r per axis");
static_assert(IN_X * IN_Y * IN_Z <= 1024, "strategy A: the input tile exceeds 1024 threads");

extern "C" __global__ void __launch_bounds__(IN_X * IN_Y * IN_Z)
mri_recon_conv_a(const elem_t* __restrict__ in, elem_t* __restrict__ out, int nx, int ny, int nz,
                 int tiles_x, int nearest)
{
    __shared__ elem_t tile[IN_Z][IN_Y][IN_X];
    const int batch = (int)blockIdx.x / tiles_x;
    const long long offset = (long long)batch * nz * ny * nx;
    in += offset;
    out += offset;
    const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
    const int x = ((int)blockIdx.x - batch * tiles_x) * OUT_X + tx - RX;
    const int y = (int)blockIdx.y * OUT_Y + ty - RY;
    const int z = (int)blockIdx.z * OUT_Z + tz - RZ;
    tile[tz][ty][tx] = load_ghost(in, x, y, z, nx, ny, nz, nearest);
    __syncthreads();

    const int ox = tx - RX, oy = ty - RY, oz = tz - RZ;
    if (ox < 0 || ox >= OUT_X || oy < 0 || oy >= OUT_Y || oz < 0 || oz >= OUT_Z) return;  // deactivated
    if (x >= nx || y >= ny || z >= nz) return;  // past the far edge (x, y, z >= 0 here)
    elem_t acc = elem_zero();
#pragma unroll conv_unroll_z
    for (int fz = 0; fz < FZ; ++fz) {
        elem_t plane = elem_zero();
#pragma unroll conv_unroll_y
        for (int fy = 0; fy < FY; ++fy) {
            elem_t row = elem_zero();
#pragma unroll
            for (int fx = 0; fx < FX; ++fx) {
                row = elem_fma(filter_tap(fz, fy, fx), tile[oz + fz][oy + fy][ox + fx], row);
            }
            plane = elem_add(plane, row);
        }
        acc = elem_add(acc, plane);
    }
    out[volume_index(x, y, z, nx, ny)] = acc;
}
#endif

#if VARIANT == 1
#ifndef TILE_X
#define TILE_X 32
#define TILE_Y 16
#define TILE_Z 1
#endif
// ---------------------------------------------------------------------------------------------------------
// Strategy B: the block is the output tile. Each thread stages its own input element in shared memory;
// taps that fall inside the staged tile read shared memory, the halo (and ghost cells) go through
// load_ghost, i.e. the read-only L1 / L2 path, where neighbouring blocks have most likely left them.
static_assert(TILE_X * TILE_Y * TILE_Z <= 1024, "strategy B: the tile exceeds 1024 threads");

extern "C" __global__ void __launch_bounds__(TILE_X * TILE_Y * TILE_Z)
mri_recon_conv_b(const elem_t* __restrict__ in, elem_t* __restrict__ out, int nx, int ny, int nz,
                 int tiles_x, int nearest)
{
    __shared__ elem_t tile[TILE_Z][TILE_Y][TILE_X];
    const int batch = (int)blockIdx.x / tiles_x;
    const long long offset = (long long)batch * nz * ny * nx;
    in += offset;
    out += offset;
    const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
    const int x0 = ((int)blockIdx.x - batch * tiles_x) * TILE_X;
    const int y0 = (int)blockIdx.y * TILE_Y, z0 = (int)blockIdx.z * TILE_Z;
    const int x = x0 + tx, y = y0 + ty, z = z0 + tz;
    const bool inside = x < nx && y < ny && z < nz;
    if (inside) tile[tz][ty][tx] = in[volume_index(x, y, z, nx, ny)];
    __syncthreads();
    if (!inside) return;

    // Staged cells are those of the tile that lie inside the volume: [0, limit) per axis.
    const int limit_x = min(TILE_X, nx - x0), limit_y = min(TILE_Y, ny - y0), limit_z = min(TILE_Z, nz - z0);
    elem_t acc = elem_zero();
#pragma unroll conv_unroll_z
    for (int fz = 0; fz < FZ; ++fz) {
        const int sz = tz + fz - RZ;
        const bool staged_z = (unsigned)sz < (unsigned)limit_z;
        elem_t plane = elem_zero();
#pragma unroll conv_unroll_y
        for (int fy = 0; fy < FY; ++fy) {
            const int sy = ty + fy - RY;
            const bool staged_zy = staged_z && (unsigned)sy < (unsigned)limit_y;
            elem_t row = elem_zero();
#pragma unroll
            for (int fx = 0; fx < FX; ++fx) {
                const int sx = tx + fx - RX;
                elem_t v;
                if (staged_zy && (unsigned)sx < (unsigned)limit_x) {
                    v = tile[sz][sy][sx];
                } else {
                    v = load_ghost(in, x + fx - RX, y + fy - RY, z + fz - RZ, nx, ny, nz, nearest);
                }
                row = elem_fma(filter_tap(fz, fy, fx), v, row);
            }
            plane = elem_add(plane, row);
        }
        acc = elem_add(acc, plane);
    }
    out[volume_index(x, y, z, nx, ny)] = acc;
}
#endif

#if VARIANT == 2
#ifndef BX
#define BX 32
#define BY 1
#define BZ 8
#define PER_THREAD 8
#endif
// ---------------------------------------------------------------------------------------------------------
// Register blocking: the block's threads load the input tile (outputs plus halo) cooperatively, in
// consecutive order so that the loads coalesce along x and the shared stores are conflict-free. Each
// thread then computes PER_THREAD consecutive outputs along z: for every (fy, fx) it reads the column of
// PER_THREAD + 2RZ values it needs once into registers and reuses each value for up to 2RZ + 1 outputs.
// A warp spans 32 consecutive x (BX = 32), so its shared reads hit 32 consecutive words: no bank conflicts.
// The separable passes are this kernel with a 1-D filter along one axis.
#define OUT_X BX
#define OUT_Y BY
#define OUT_Z (BZ * PER_THREAD)
#define SX (OUT_X + 2 * RX)
#define SY (OUT_Y + 2 * RY)
#define SZ (OUT_Z + 2 * RZ)
#define THREADS (BX * BY * BZ)
#define COLUMN (PER_THREAD + 2 * RZ)
#define TILE_ELEMENTS (SZ * SY * SX)
#define LOADS_PER_THREAD ((TILE_ELEMENTS + THREADS - 1) / THREADS)
static_assert(THREADS <= 1024, "register tile: the block exceeds 1024 threads");
// Tile loads of interior blocks go in batches: first every load of the batch (issued back to back, the index
// clamped into the tile so that none needs a branch), then the shared stores. The fy loop is unrolled only
// when the whole filter times the outputs stays small (each unrolled FMA is an instruction).
constexpr int conv_load_batch = (LOADS_PER_THREAD <= 16) ? LOADS_PER_THREAD : 8;
constexpr int conv_unroll_y = (FILTER_TAPS * PER_THREAD * (COMPLEX + 1) <= 2048) ? FY : 1;

extern __shared__ __align__(16) unsigned char conv_shared[];

extern "C" __global__ void __launch_bounds__(THREADS)
mri_recon_conv_register(const elem_t* __restrict__ in, elem_t* __restrict__ out, int nx, int ny, int nz,
                        int tiles_x, int nearest)
{
    elem_t* tile = reinterpret_cast<elem_t*>(conv_shared);  // [SZ][SY][SX]
    const int batch = (int)blockIdx.x / tiles_x;
    const long long offset = (long long)batch * nz * ny * nx;
    in += offset;
    out += offset;
    const int x0 = ((int)blockIdx.x - batch * tiles_x) * OUT_X;
    const int y0 = (int)blockIdx.y * OUT_Y, z0 = (int)blockIdx.z * OUT_Z;

    // Stage the input tile; blocks whose tile lies inside the volume skip the ghost-cell tests.
    const int tid = (threadIdx.z * BY + threadIdx.y) * BX + threadIdx.x;
    const bool interior = x0 >= RX && x0 + OUT_X + RX <= nx && y0 >= RY && y0 + OUT_Y + RY <= ny &&
                          z0 >= RZ && z0 + OUT_Z + RZ <= nz;
    if (interior) {
        const elem_t* corner = in + volume_index(x0 - RX, y0 - RY, z0 - RZ, nx, ny);
        const long long plane = (long long)ny * nx;
        for (int first = 0; first < LOADS_PER_THREAD; first += conv_load_batch) {
            elem_t staged[conv_load_batch];
#pragma unroll
            for (int k = 0; k < conv_load_batch; ++k) {
                const int i = min(tid + (first + k) * THREADS, TILE_ELEMENTS - 1);
                const int sx = i % SX;
                const int rest = i / SX;
                staged[k] = __ldg(corner + (long long)(rest / SY) * plane + (long long)(rest % SY) * nx + sx);
            }
#pragma unroll
            for (int k = 0; k < conv_load_batch; ++k) {
                const int i = tid + (first + k) * THREADS;
                if (i < TILE_ELEMENTS) tile[i] = staged[k];
            }
        }
    } else {
        for (int i = tid; i < TILE_ELEMENTS; i += THREADS) {
            const int sx = i % SX;
            const int rest = i / SX;
            tile[i] = load_ghost(in, x0 - RX + sx, y0 - RY + rest % SY, z0 - RZ + rest / SY, nx, ny, nz,
                                 nearest);
        }
    }
    __syncthreads();

    const int zt = threadIdx.z * PER_THREAD;  // first tile row of this thread's outputs
    const int x = x0 + threadIdx.x, y = y0 + threadIdx.y, z = z0 + zt;
    if (x >= nx || y >= ny || z >= nz) return;

    elem_t acc[PER_THREAD];
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k) acc[k] = elem_zero();
#pragma unroll conv_unroll_y
    for (int fy = 0; fy < FY; ++fy) {
        elem_t row[PER_THREAD];
#pragma unroll
        for (int k = 0; k < PER_THREAD; ++k) row[k] = elem_zero();
#pragma unroll
        for (int fx = 0; fx < FX; ++fx) {
            const elem_t* column = tile + (zt * SY + threadIdx.y + fy) * SX + threadIdx.x + fx;
            elem_t v[COLUMN];
#pragma unroll
            for (int j = 0; j < COLUMN; ++j) v[j] = column[j * (SY * SX)];
#pragma unroll
            for (int k = 0; k < PER_THREAD; ++k) {
                if (FZ == 1) {  // no z extent (x and y passes): one level less
                    row[k] = elem_fma(filter_tap(0, fy, fx), v[k], row[k]);
                } else {
                    elem_t part = elem_zero();
#pragma unroll
                    for (int fz = 0; fz < FZ; ++fz) part = elem_fma(filter_tap(fz, fy, fx), v[k + fz], part);
                    row[k] = elem_add(row[k], part);
                }
            }
        }
#pragma unroll
        for (int k = 0; k < PER_THREAD; ++k) acc[k] = elem_add(acc[k], row[k]);
    }
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k) {
        if (z + k < nz) out[volume_index(x, y, z + k, nx, ny)] = acc[k];
    }
}
#endif

#if VARIANT == 3
#ifndef ROWS
#define ROWS 8
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef PREFETCH
#define PREFETCH 2
#endif
// ---------------------------------------------------------------------------------------------------------
// Row streaming, for 2-D filters on images whose rows are whole 16-byte vectors (nx % VEC == 0, aligned
// pointers; the launcher checks). The volume is nz independent planes of ny rows. Thread = one vector of
// VEC elements (float4: 4 floats or 2 complex) of a row; a warp covers 32 consecutive vectors; the thread
// walks the ROWS + 2RY input rows of ROWS output rows once, top to bottom. Each input element is loaded
// once per block, as part of one 16-byte load per thread (the warp's row segment is 512 contiguous bytes);
// the x halo comes from the neighbouring lanes by warp shuffles, and only lanes 0 and 31 load the RX
// elements beyond the warp's segment. Every input row is used at once for the 2RY + 1 output rows it
// touches (their partial sums stay in registers: 2RY + 1 rows of VEC accumulators), and the loads of the
// next PREFETCH rows are in flight while a row is computed. No shared memory, no barrier.
#define VEC (16 / (int)sizeof(elem_t))
#define SPAN (VEC + 2 * RX)
#define STEPS (ROWS + 2 * RY)
static_assert(RZ == 0, "row streaming: the filter must be 2-D (RZ = 0)");
static_assert(RX <= VEC, "row streaming: RX must not exceed the elements per vector");
static_assert(PREFETCH >= 1, "row streaming: PREFETCH must be >= 1");

union vec16 {
    float4 raw;
    elem_t e[VEC];
};

__device__ __forceinline__ elem_t elem_shfl_up(elem_t v, int lane_delta)
{
#if COMPLEX
    return make_float2(__shfl_up_sync(0xffffffffu, v.x, lane_delta), __shfl_up_sync(0xffffffffu, v.y, lane_delta));
#else
    return __shfl_up_sync(0xffffffffu, v, lane_delta);
#endif
}

__device__ __forceinline__ elem_t elem_shfl_down(elem_t v, int lane_delta)
{
#if COMPLEX
    return make_float2(__shfl_down_sync(0xffffffffu, v.x, lane_delta),
                       __shfl_down_sync(0xffffffffu, v.y, lane_delta));
#else
    return __shfl_down_sync(0xffffffffu, v, lane_delta);
#endif
}

// Element x of a row (row == nullptr: a ghost row of zeros), ghost cells outside [0, nx).
__device__ __forceinline__ elem_t load_element(const elem_t* __restrict__ row, int x, int nx, int nearest)
{
    if (row == nullptr) return elem_zero();
    if ((unsigned)x < (unsigned)nx) return __ldg(row + x);
    return nearest ? __ldg(row + (x < 0 ? 0 : nx - 1)) : elem_zero();
}

// The loads of one input row: this thread's vector, and for lane 0 (31) the RX elements left (right) of the
// warp's segment.
struct row_loads {
    vec16 mid;
    elem_t edge[RX > 0 ? RX : 1];
};

__device__ __forceinline__ row_loads load_row(const elem_t* __restrict__ plane, int y, int ny, int nx, int v,
                                              int lane, int nearest)
{
    const elem_t* row = nullptr;
    if (nearest) {
        row = plane + (long long)min(max(y, 0), ny - 1) * nx;
    } else if ((unsigned)y < (unsigned)ny) {
        row = plane + (long long)y * nx;
    }
    row_loads r;
    if (row != nullptr && v < nx / VEC) {
        r.mid.raw = __ldg(reinterpret_cast<const float4*>(row) + v);
    } else {  // past the row's end (or a ghost row): ghost cells
        const elem_t edge = (row != nullptr && nearest) ? __ldg(row + nx - 1) : elem_zero();
#pragma unroll
        for (int k = 0; k < VEC; ++k) r.mid.e[k] = edge;
    }
    const int x0 = v * VEC;
#pragma unroll
    for (int j = 0; j < RX; ++j) {
        r.edge[j] = elem_zero();
        if (lane == 0) r.edge[j] = load_element(row, x0 - RX + j, nx, nearest);
        if (lane == 31) r.edge[j] = load_element(row, x0 + VEC + j, nx, nearest);
    }
    return r;
}

// Elements x0 - RX .. x0 + VEC + RX - 1 of the row (x0 = v * VEC), from the loads and the neighbours' vectors.
__device__ __forceinline__ void assemble(const row_loads& r, int lane, elem_t (&span)[SPAN])
{
#pragma unroll
    for (int j = 0; j < RX; ++j) {
        const elem_t left = elem_shfl_up(r.mid.e[VEC - RX + j], 1);
        const elem_t right = elem_shfl_down(r.mid.e[j], 1);
        span[j] = lane == 0 ? r.edge[j] : left;
        span[RX + VEC + j] = lane == 31 ? r.edge[j] : right;
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) span[RX + k] = r.mid.e[k];
}

extern "C" __global__ void __launch_bounds__(32 * WARPS)
mri_recon_conv_stream(const elem_t* __restrict__ in, elem_t* __restrict__ out, int nx, int ny, int nz,
                      int tiles_x, int nearest)
{
    (void)tiles_x;
    (void)nz;
    const int lane = threadIdx.x & 31;
    const int first_vector = ((int)blockIdx.x * WARPS + (threadIdx.x >> 5)) * 32;  // of this warp
    const int nvec = nx / VEC;
    if (first_vector >= nvec) return;  // the whole warp lies past the row's end
    const int v = first_vector + lane;
    const long long plane_offset = (long long)blockIdx.z * ny * nx;
    const elem_t* plane = in + plane_offset;
    elem_t* target = out + plane_offset;
    const int y0 = (int)blockIdx.y * ROWS;  // first output row; input rows y0 - RY .. y0 + ROWS + RY - 1

    row_loads ring[PREFETCH];  // loads of input steps t .. t + PREFETCH - 1
#pragma unroll
    for (int t = 0; t < PREFETCH && t < STEPS; ++t) ring[t] = load_row(plane, y0 - RY + t, ny, nx, v, lane, nearest);
    elem_t acc[FY][VEC];  // partial sums of output rows, slot (row - y0) % FY
#pragma unroll
    for (int t = 0; t < STEPS; ++t) {
        elem_t span[SPAN];
        assemble(ring[t % PREFETCH], lane, span);
        if (t + PREFETCH < STEPS) ring[t % PREFETCH] = load_row(plane, y0 - RY + t + PREFETCH, ny, nx, v, lane, nearest);
        // input step t is filter row fy of output row t - fy; rows are summed in fy order, as elsewhere
#pragma unroll
        for (int fy = 0; fy < FY; ++fy) {
            const int row = t - fy;
            if (row < 0 || row >= ROWS) continue;
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                elem_t part = elem_zero();
#pragma unroll
                for (int fx = 0; fx < FX; ++fx) part = elem_fma(filter_tap(0, fy, fx), span[k + fx], part);
                acc[row % FY][k] = fy == 0 ? part : elem_add(acc[row % FY][k], part);
            }
        }
        const int finished = t - 2 * RY;  // output row whose last filter row was step t
        if (finished >= 0 && y0 + finished < ny && v < nvec) {
            vec16 result;
#pragma unroll
            for (int k = 0; k < VEC; ++k) result.e[k] = acc[finished % FY][k];
            reinterpret_cast<float4*>(target + (long long)(y0 + finished) * nx)[v] = result.raw;
        }
    }
}
#endif

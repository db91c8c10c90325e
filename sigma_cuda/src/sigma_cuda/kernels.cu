// Sigma's CUDA kernels: the hot ops of a training step, one launch each.
//
// Compiled once per process by NVRTC (cupy.RawModule, cached on disk by CuPy)
// and instantiated for T = float and double; L is the integer type of class
// labels. Elementwise kernels are grid-stride loops over a 64-bit index, so a
// launch of any grid size covers any array. Every array is C-contiguous (the
// Python side checks, and hands anything else to the generic CuPy kernels).
// The optimiser updates read the deferred non-finite flag ``bad`` first: once a
// step's cost was not finite, no parameter changes until the host has seen it.
// The kernels whose scalars change from step to step (hyperparameters, dropout's
// stream) are instantiated twice: S = the scalar type, passed by value, and
// S = a pointer to it, read on the device: a CUDA graph (graphs.py) launches the
// latter, its host rewriting the scalars before each launch.

#define GRID_STRIDE(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (long long)blockDim.x * gridDim.x)

// Activation codes: 0 none, 1 relu, 2 sigmoid, 3 tanh, 4 softplus (kernels.py ACTIVATION_CODES).
template <typename T>
__device__ __forceinline__ T activate(T v, int code) {
    switch (code) {
        case 1: return v < T(0) ? T(0) : v;  // a NaN stays NaN, as with NumPy's maximum
        case 2: return tanh(v * T(0.5)) * T(0.5) + T(0.5);  // as the reference: exp(-v) would overflow
        case 3: return tanh(v);
        case 4: return (v > T(0) ? v : T(0)) + log1p(exp(-fabs(v)));
        default: return v;
    }
}

// g·f'(x) from the output y = f(x): every built-in derivative is a function of the output.
template <typename T>
__device__ __forceinline__ T derivative_times(T g, T y, int code) {
    switch (code) {
        case 1: return y > T(0) ? g : T(0) * g;  // 0·g keeps a NaN gradient NaN, as the reference does
        case 2: return (T(1) - y) * y * g;
        case 3: return (T(1) - y * y) * g;
        case 4: return (T(1) - exp(-y)) * g;
        default: return g;
    }
}

template <typename T> __device__ __forceinline__ T value(T v) { return v; }
template <typename T> __device__ __forceinline__ T value(const T* p) { return *p; }

template <typename T> __device__ __forceinline__ T quiet_nan();
template <> __device__ __forceinline__ float quiet_nan<float>() { return __int_as_float(0x7fc00000); }
template <> __device__ __forceinline__ double quiet_nan<double>() { return __longlong_as_double(0x7ff8000000000000LL); }

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        T other = __shfl_xor_sync(0xffffffffu, v, offset);
        v = other > v ? other : v;
    }
    return v;
}

// -- dense layer -------------------------------------------------------------------------------
// y = activation(y + bias[column]) in place, after cuBLAS wrote y = x·W.
template <typename T>
__global__ void bias_activation(T* y, const T* bias, long long n, long long cols, int use_bias, int code) {
    GRID_STRIDE(i, n) {
        T v = y[i];
        if (use_bias) v += bias[i % cols];
        y[i] = activate(v, code);
    }
}

template <typename T>
__global__ void activation_backward(const T* g, const T* y, T* out, long long n, int code) {
    GRID_STRIDE(i, n) out[i] = derivative_times(g[i], y[i], code);
}

// out[c] = Σ_r x[r, c]: blocks of 32 columns × 8 row lanes, the lanes' partial sums added in shared memory.
template <typename T>
__global__ void column_sums(const T* x, T* out, long long rows, long long cols) {
    __shared__ T partial[8][33];
    const int column_in_tile = threadIdx.x & 31, lane = threadIdx.x >> 5;
    const long long column = (long long)blockIdx.x * 32 + column_in_tile;
    T sum = T(0);
    if (column < cols)
        for (long long r = lane; r < rows; r += 8) sum += x[r * cols + column];
    partial[lane][column_in_tile] = sum;
    __syncthreads();
    if (lane == 0 && column < cols) {
        for (int k = 1; k < 8; ++k) sum += partial[k][column_in_tile];
        out[column] = sum;
    }
}

// -- softmax cross-entropy: one warp per row ---------------------------------------------------
// Writes the row's softmax into p and its cost into row_cost: log Z − s[label] (labels), or
// mass·log Z − Σ t·s (target rows of any mass), with s = x − row max and Z = Σ exp(s).
// A label outside 0..cols-1 (the host checks first) gives a NaN cost instead of a wild read.
template <typename T, typename L>
__global__ void softmax_ce_forward(const T* x, const L* labels, const T* targets, T* p, T* row_cost,
                                   long long rows, long long cols) {
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;  // the whole warp leaves together: blockDim is a multiple of 32
    const T* xr = x + row * cols;
    T* pr = p + row * cols;
    T top = xr[0];
    for (long long j = lane; j < cols; j += 32) top = xr[j] > top ? xr[j] : top;
    top = warp_max(top);
    T z = T(0);
    for (long long j = lane; j < cols; j += 32) {
        const T e = exp(xr[j] - top);
        pr[j] = e;
        z += e;
    }
    z = warp_sum(z);
    const T inverse = T(1) / z;
    for (long long j = lane; j < cols; j += 32) pr[j] *= inverse;
    T cost;
    if (labels != nullptr) {
        const long long t = (long long)labels[row];
        cost = (t < 0 || t >= cols) ? quiet_nan<T>() : log(z) - (xr[t] - top);
    } else {
        const T* tr = targets + row * cols;
        T mass = T(0), dot = T(0);
        for (long long j = lane; j < cols; j += 32) {
            mass += tr[j];
            dot += tr[j] * (xr[j] - top);
        }
        cost = warp_sum(mass) * log(z) - warp_sum(dot);
    }
    if (lane == 0) row_cost[row] = cost;
}

// cost[0] = Σ row_cost / rows, one block of 256 threads, in double: deterministic and exact enough.
template <typename T>
__global__ void mean_of_rows(const T* row_cost, T* cost, long long rows) {
    __shared__ double partial[256];
    double sum = 0.0;
    for (long long r = threadIdx.x; r < rows; r += blockDim.x) sum += (double)row_cost[r];
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) cost[0] = (T)(partial[0] / (double)rows);
}

// out = (mass·p − t)·g/rows per row, t the one-hot label (mass 1) or the target row; g read on the device.
template <typename T, typename L>
__global__ void softmax_ce_backward(const T* p, const L* labels, const T* targets, const T* g, T* out,
                                    long long rows, long long cols, T inverse_rows) {
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T scale = g[0] * inverse_rows;
    const T* pr = p + row * cols;
    T* outr = out + row * cols;
    if (labels != nullptr) {
        const long long t = (long long)labels[row];
        for (long long j = lane; j < cols; j += 32) outr[j] = (pr[j] - (j == t ? T(1) : T(0))) * scale;
    } else {
        const T* tr = targets + row * cols;
        T mass = T(0);
        for (long long j = lane; j < cols; j += 32) mass += tr[j];
        mass = warp_sum(mass);
        for (long long j = lane; j < cols; j += 32) outr[j] = (pr[j] * mass - tr[j]) * scale;
    }
}

// -- dropout: a counter-based generator, no state on the device ----------------------------------
// splitmix64's output function, the same bits as sigma_cpu's numba kernel.
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// Element i is kept when the top 53 bits of mix(stream + (i+1)·golden) fall below threshold: each
// draw depends on (stream, i) alone, so the mask is reproducible from the seed and the call count.
template <typename T, typename S>
__global__ void dropout(const T* x, T* y, T* mask, long long n, S stream_, unsigned long long threshold, T scale) {
    const unsigned long long stream = value(stream_);
    GRID_STRIDE(i, n) {
        const unsigned long long z = mix64(stream + (unsigned long long)(i + 1) * 0x9E3779B97F4A7C15ULL);
        const T m = (z >> 11) < threshold ? scale : T(0) * scale;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

// -- the deferred non-finite check of a step's cost ------------------------------------------------
template <typename T>
__global__ void flag_non_finite(const T* x, int* bad) {
    if (!isfinite(x[0])) *bad = 1;
}

// -- optimiser updates: one pass over each parameter ------------------------------------------------
// Complements (rest = 1 − rho) arrive computed in double on the host: 1 − 0.9999 in float32 is off by 2e-4.
template <typename T, typename S>
__global__ void l2_gradient(const T* grad, const T* param, T* out, long long n, S weight_decay_) {
    const T weight_decay = value(weight_decay_);
    GRID_STRIDE(i, n) out[i] = grad[i] + weight_decay * param[i];
}

template <typename T, typename S>
__global__ void sgd(T* param, const T* grad, long long n, S lr_, const int* bad) {
    if (*bad) return;
    const T lr = value(lr_);
    GRID_STRIDE(i, n) param[i] -= lr * grad[i];
}

// nesterov: 1 or 0, as T (so that it can be read on the device like the rest)
template <typename T, typename S>
__global__ void momentum(T* param, const T* grad, T* velocity, long long n, S lr_, S mu_, S nesterov_, const int* bad) {
    if (*bad) return;
    const T lr = value(lr_), mu = value(mu_);
    const bool nesterov = value(nesterov_) != T(0);
    GRID_STRIDE(i, n) {
        const T v = mu * velocity[i] + grad[i];
        velocity[i] = v;
        param[i] -= nesterov ? lr * (grad[i] + mu * v) : lr * v;
    }
}

template <typename T, typename S>
__global__ void adagrad(T* param, const T* grad, T* sq, long long n, S lr_, S eps_, const int* bad) {
    if (*bad) return;
    const T lr = value(lr_), eps = value(eps_);
    GRID_STRIDE(i, n) {
        const T s = sq[i] + grad[i] * grad[i];
        sq[i] = s;
        param[i] -= lr * (grad[i] / (sqrt(s) + eps));
    }
}

template <typename T, typename S>
__global__ void rmsprop(T* param, const T* grad, T* sq, long long n, S lr_, S rho_, S rest_, S eps_, const int* bad) {
    if (*bad) return;
    const T lr = value(lr_), rho = value(rho_), rest = value(rest_), eps = value(eps_);
    GRID_STRIDE(i, n) {
        const T s = rho * sq[i] + rest * (grad[i] * grad[i]);
        sq[i] = s;
        param[i] -= lr * (grad[i] / (sqrt(s) + eps));
    }
}

template <typename T, typename S>
__global__ void adadelta(T* param, const T* grad, T* acc_grad, T* acc_update, long long n, S lr_, S rho_, S rest_,
                         S eps_, const int* bad) {
    if (*bad) return;
    const T lr = value(lr_), rho = value(rho_), rest = value(rest_), eps = value(eps_);
    GRID_STRIDE(i, n) {
        const T a = rho * acc_grad[i] + rest * (grad[i] * grad[i]);
        acc_grad[i] = a;
        const T delta = sqrt(acc_update[i] + eps) / sqrt(a + eps) * grad[i];
        acc_update[i] = rho * acc_update[i] + rest * (delta * delta);
        param[i] -= lr * delta;
    }
}

// Adam with the bias corrections folded into step_size = lr/(1−β1^t) and root_correction = 1/√(1−β2^t).
template <typename T, typename S>
__global__ void adam(T* param, const T* grad, T* m, T* v, long long n, S step_size_, S beta1_, S rest1_, S beta2_,
                     S rest2_, S root_correction_, S eps_, const int* bad) {
    if (*bad) return;
    const T step_size = value(step_size_), beta1 = value(beta1_), rest1 = value(rest1_), beta2 = value(beta2_),
            rest2 = value(rest2_), root_correction = value(root_correction_), eps = value(eps_);
    GRID_STRIDE(i, n) {
        const T mi = beta1 * m[i] + rest1 * grad[i];
        const T vi = beta2 * v[i] + rest2 * (grad[i] * grad[i]);
        m[i] = mi;
        v[i] = vi;
        param[i] -= step_size * (mi / (sqrt(vi) * root_correction + eps));
    }
}

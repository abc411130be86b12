/* A dense grid model's axis-aligned tile in one pass (service/engine/lattice.py, `Kernel`): per level, the table
 * rows a tile's samples touch interpolated along the columns (each row once, kept while the samples' rows use it),
 * then per pixel the rows' interpolation, the head (Gemm layers with ReLU between them, an optional final Sigmoid)
 * and the pixel, in registers, 16 pixels at a time; the GIL is released while it runs.
 *
 * The arithmetic is the numpy lattice's (lattice.py, `level_into`) in float32: a column sample is a + w·(b − a) of
 * the two cells' values, an 8-bit table's scale and low applied after it, a row sample a + t·(b − a) of the two
 * rows' column samples; the head's layers are the graph's. Python checks its result against the whole graph at
 * load (PARITY), as it does the numpy lattice's.
 *
 * tile(levels, layers, sigmoid, axes, x0, y0, out):
 *   levels  tuple per level of (table [F, ry, rx] uint8 or float32, any strides (a view of the packed corner
 *           cells the session reads: service/engine/shared_tables.py), scale [F] float32 or None, low [F] or None)
 *   layers  tuple of (W [out, in] float32, b [out] float32); the first layer's in is ΣF rounded up to 16 (its
 *           extra columns 0), the last layer's out is 3
 *   sigmoid a bool: the last layer's Sigmoid
 *   axes    tuple per level of (cols first, cols after, cols weight, rows first, rows after, rows weight): int64
 *           indices into the level's columns and rows, float32 weights, of a whole render's columns and rows
 *   x0, y0  the tile's first column and row in them
 *   out     the tile, R rows × C columns: float32 [R, C, 3] (rgb) or uint8 [R, C, 3] (pixels: clipped to [0, 1],
 *           times 255, rounded to even; rows may be strided, as a view of an image is)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LANES 16
#define MAX_LEVELS 32
#define MAX_WIDTH 256 /* features and hidden units */
#define MAX_LAYERS 8
#define MAX_BUFFERS (MAX_LEVELS * 9 + MAX_LAYERS * 2 + 1)

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif
#define INLINE static inline __attribute__((always_inline))

typedef float v16 __attribute__((vector_size(LANES * 4)));
typedef int32_t i16 __attribute__((vector_size(LANES * 4)));

typedef struct {
    const uint8_t *t8;
    const float *t32;
    Py_ssize_t F, ry, rx;
    Py_ssize_t sf, sr, sc; /* the table's strides in bytes: a view of packed corner cells is not contiguous */
    const float *scale, *low;
    const int64_t *cf, *ca, *rf, *ra;
    const float *cw, *rw;
    float *slot[2]; /* two column-interpolated table rows, [F, Cpad] each */
    Py_ssize_t slot_row[2];
    Py_ssize_t c0, c1; /* the table columns the tile touches */
    int32_t *ci, *cai; /* the columns' cells, less c0 */
    float *span;       /* one table row's [c0, c1) in float32 */
} Level;

typedef struct {
    int n;
    Py_ssize_t in[MAX_LAYERS], out[MAX_LAYERS];
    const float *w[MAX_LAYERS], *b[MAX_LAYERS];
    int sigmoid;
} Head;

INLINE v16 splat(float x) { return (v16){0} + x; }
INLINE v16 load(const float *p) {
    v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}
INLINE v16 blend(i16 mask, v16 a, v16 b) { /* a where mask, else b */
    i16 ai, bi;
    memcpy(&ai, &a, sizeof ai);
    memcpy(&bi, &b, sizeof bi);
    ai = (ai & mask) | (bi & ~mask);
    memcpy(&a, &ai, sizeof a);
    return a;
}
INLINE v16 relu(v16 x) { /* NaN → 0, as np.fmax(x, 0) (one max instruction where there is one) */
    v16 r;
    for (int i = 0; i < LANES; i++) r[i] = x[i] > 0 ? x[i] : 0;
    return r;
}

/* e^x in float32 (Cephes' expf: a degree-6 polynomial on [−ln2/2, ln2/2], ~1 ulp) */
INLINE v16 vexp(v16 x) {
    x = blend(x < 88.3762626647949f, x, splat(88.3762626647949f));
    x = blend(x > -87.3365478515625f, x, splat(-87.3365478515625f));
    v16 fx = x * 1.44269504088896341f + 0.5f;
    i16 n = __builtin_convertvector(fx, i16); /* toward zero: floor for fx ≥ 0, one more below */
    v16 fn = __builtin_convertvector(n, v16);
    i16 over = fn > fx;
    n += over; /* over is −1 where truncation rounded up */
    fn = __builtin_convertvector(n, v16);
    x = x - fn * 0.693359375f + fn * 2.12194440e-4f;
    v16 z = x * x;
    v16 y = splat(1.9875691500E-4f);
    y = y * x + 1.3981999507E-3f;
    y = y * x + 8.3334519073E-3f;
    y = y * x + 4.1665795894E-2f;
    y = y * x + 1.6666665459E-1f;
    y = y * x + 5.0000001201E-1f;
    y = y * z + x + 1.0f;
    i16 bits = (n + 127) << 23;
    v16 scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

INLINE void span_u8(float *restrict span, const uint8_t *restrict src, Py_ssize_t width, const Py_ssize_t sc) {
    for (Py_ssize_t n = 0; n < width; n++) span[n] = src[n * sc];
}

/* Level `lv`'s table row r interpolated along the tile's C columns into a slot; the slot holding row `keep` stays.
 * The columns the tile touches, [c0, c1), are converted to float32 first (contiguous: in vectors), then each
 * column's two cells gathered from them. */
INLINE const float *row(Level *lv, Py_ssize_t r, Py_ssize_t keep, Py_ssize_t C, Py_ssize_t Cpad) {
    if (lv->slot_row[0] == r) return lv->slot[0];
    if (lv->slot_row[1] == r) return lv->slot[1];
    int s = lv->slot_row[0] == keep ? 1 : 0;
    float *restrict dst = lv->slot[s], *restrict span = lv->span;
    const int32_t *restrict ci = lv->ci, *restrict ca = lv->cai;
    const float *restrict cw = lv->cw;
    Py_ssize_t width = lv->c1 - lv->c0;
    lv->slot_row[s] = r;
    for (Py_ssize_t f = 0; f < lv->F; f++) {
        float *restrict d = dst + f * Cpad;
        Py_ssize_t base = f * lv->sf + r * lv->sr + lv->c0 * lv->sc, sc = lv->sc;
        if (lv->t8) {
            const uint8_t *restrict src = lv->t8 + base;
            /* the strides of packed corner cells of 1 and 2 features as constants: loops the compiler vectorises */
            switch (sc) {
            case 1: span_u8(span, src, width, 1); break;
            case 4: span_u8(span, src, width, 4); break;
            case 8: span_u8(span, src, width, 8); break;
            default: span_u8(span, src, width, sc);
            }
        } else {
            const char *src = (const char *)lv->t32 + base;
            if (sc == sizeof(float))
                memcpy(span, src, width * sizeof(float));
            else
                for (Py_ssize_t n = 0; n < width; n++) memcpy(span + n, src + n * sc, sizeof(float));
        }
        if (lv->scale) {
            float scale = lv->scale[f], low = lv->low[f];
            for (Py_ssize_t n = 0; n < C; n++) {
                float a = span[ci[n]], b = span[ca[n]];
                d[n] = (a + (b - a) * cw[n]) * scale + low;
            }
        } else {
            for (Py_ssize_t n = 0; n < C; n++) {
                float a = span[ci[n]], b = span[ca[n]];
                d[n] = a + (b - a) * cw[n];
            }
        }
        for (Py_ssize_t n = C; n < Cpad; n++) d[n] = 0;
    }
    return dst;
}

/* One hidden layer on nf ≤ 16 features (the grid preset's 15 → 32 → 3): the features stay in registers; nf is a
 * constant where it is inlined, so that the loop over them unrolls. The hidden units go GROUP at a time, their sums
 * side by side: one unit's sum is a chain of nf dependent multiply-adds, and GROUP chains keep the FMA units busy
 * where one would wait on each step's latency. Each unit's sum and the outputs' sums keep their order (bitwise the
 * same as one unit at a time). */
#define GROUP 8
INLINE void head1(const v16 *x, const Head *h, v16 *o, const int nf) {
    const float *w1 = h->w[0], *b1 = h->b[0], *w2 = h->w[1], *b2 = h->b[1];
    Py_ssize_t H = h->out[0], j = 0;
    v16 o0 = splat(b2[0]), o1 = splat(b2[1]), o2 = splat(b2[2]);
    for (; j + GROUP <= H; j += GROUP) {
        v16 a[GROUP];
        for (int g = 0; g < GROUP; g++) a[g] = splat(b1[j + g]);
        for (int f = 0; f < nf; f++)
            for (int g = 0; g < GROUP; g++) a[g] += x[f] * w1[(j + g) * LANES + f];
        for (int g = 0; g < GROUP; g++) {
            v16 r = relu(a[g]);
            o0 += r * w2[j + g];
            o1 += r * w2[H + j + g];
            o2 += r * w2[2 * H + j + g];
        }
    }
    for (; j < H; j++) {
        const float *w = w1 + j * LANES;
        v16 a = splat(b1[j]);
        for (int f = 0; f < nf; f++) a += x[f] * w[f];
        a = relu(a);
        o0 += a * w2[j];
        o1 += a * w2[H + j];
        o2 += a * w2[2 * H + j];
    }
    o[0] = o0, o[1] = o1, o[2] = o2;
}

/* Any depth and width: each layer's inputs in a buffer */
INLINE void head_any(const v16 *x, const Head *h, v16 *o, v16 *buf_a, v16 *buf_b) {
    const v16 *in = x;
    for (int l = 0; l < h->n; l++) {
        v16 *dst = l == h->n - 1 ? o : (l % 2 ? buf_b : buf_a);
        const float *w = h->w[l], *b = h->b[l];
        Py_ssize_t ni = h->in[l];
        for (Py_ssize_t j = 0; j < h->out[l]; j++) {
            v16 a = splat(b[j]);
            for (Py_ssize_t i = 0; i < ni; i++) a += in[i] * w[j * ni + i];
            dst[j] = l == h->n - 1 ? a : relu(a);
        }
        in = dst;
    }
}

CLONES
static void compute(Level *levels, int nlevels, const Head *h, Py_ssize_t features, Py_ssize_t R, Py_ssize_t C,
                    Py_ssize_t Cpad, float *out_f, uint8_t *out_u8, Py_ssize_t stride) {
    v16 x[MAX_WIDTH], buf_a[MAX_WIDTH], buf_b[MAX_WIDTH], o[3];
    const float *pa[MAX_LEVELS], *pb[MAX_LEVELS];
    float t[MAX_LEVELS];
    int one = h->n == 2 && h->in[0] == LANES; /* one hidden layer on at most 16 features */
    for (Py_ssize_t k = features; k < h->in[0]; k++) x[k] = splat(0);
    for (Py_ssize_t m = 0; m < R; m++) {
        for (int l = 0; l < nlevels; l++) {
            Level *lv = &levels[l];
            pa[l] = row(lv, lv->rf[m], lv->ra[m], C, Cpad);
            pb[l] = row(lv, lv->ra[m], lv->rf[m], C, Cpad);
            t[l] = lv->rw[m];
        }
        for (Py_ssize_t n0 = 0; n0 < Cpad; n0 += LANES) {
            Py_ssize_t k = 0;
            for (int l = 0; l < nlevels; l++) {
                v16 tl = splat(t[l]);
                for (Py_ssize_t f = 0; f < levels[l].F; f++, k++) {
                    v16 a = load(pa[l] + f * Cpad + n0), b = load(pb[l] + f * Cpad + n0);
                    x[k] = a + (b - a) * tl;
                }
            }
            if (one && features == 15)
                head1(x, h, o, 15);
            else if (one)
                head1(x, h, o, LANES);
            else
                head_any(x, h, o, buf_a, buf_b);
            if (h->sigmoid)
                for (int c = 0; c < 3; c++) o[c] = 1.0f / (1.0f + vexp(-o[c]));
            Py_ssize_t lanes = C - n0 < LANES ? C - n0 : LANES;
            if (out_f) {
                float *dst = out_f + (m * C + n0) * 3;
                for (Py_ssize_t j = 0; j < lanes; j++)
                    for (int c = 0; c < 3; c++) dst[j * 3 + c] = o[c][j];
            } else {
                i16 q[3];
                for (int c = 0; c < 3; c++) {
                    v16 v = relu(o[c]); /* NaN → 0 */
                    v = blend(v < 1.0f, v, splat(1.0f)) * 255.0f;
                    /* rounded to even by adding and taking away 1.5·2^23 (exact for 0 ≤ v < 2^22) */
                    v = (v + 12582912.0f) - 12582912.0f;
                    q[c] = __builtin_convertvector(v, i16);
                }
                uint8_t *dst = out_u8 + m * stride + n0 * 3;
                for (Py_ssize_t j = 0; j < lanes; j++)
                    for (int c = 0; c < 3; c++) dst[j * 3 + c] = (uint8_t)q[c][j];
            }
        }
    }
}

/* -- the Python side ------------------------------------------------------------------------------------------ */

typedef struct {
    Py_buffer views[MAX_BUFFERS];
    int n;
} Buffers;

static void release(Buffers *bufs) {
    while (bufs->n > 0) PyBuffer_Release(&bufs->views[--bufs->n]);
}

/* A buffer of `obj`: C-contiguous (unless `strided`), of the format's one-letter type, `ndim` dimensions */
static Py_buffer *get(Buffers *bufs, PyObject *obj, const char *formats, int ndim, int writable, const char *what) {
    if (bufs->n >= MAX_BUFFERS) {
        PyErr_SetString(PyExc_ValueError, "lattice kernel: too many arrays");
        return NULL;
    }
    Py_buffer *v = &bufs->views[bufs->n];
    int flags = PyBUF_FORMAT | PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, v, flags) < 0) return NULL;
    bufs->n++;
    const char *fmt = v->format ? v->format : "B";
    if (fmt[0] == '<' || fmt[0] == '=' || fmt[0] == '@') fmt++;
    if (strlen(fmt) != 1 || !strchr(formats, fmt[0]) || v->ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "lattice kernel: %s has format %s and %d dimensions", what, v->format,
                     v->ndim);
        return NULL;
    }
    return v;
}

static int contiguous(Py_buffer *v, const char *what) {
    if (!PyBuffer_IsContiguous(v, 'C')) {
        PyErr_Format(PyExc_ValueError, "lattice kernel: %s is not contiguous", what);
        return 0;
    }
    return 1;
}

/* An axis of a whole render: n int64 indices (into [0, limit)) or float32 weights; the tile's [at, at + count) */
static int axis(Py_buffer *v, int is_index, Py_ssize_t n, Py_ssize_t at, Py_ssize_t count, Py_ssize_t limit,
                const char *what) {
    if (!contiguous(v, what)) return 0;
    if (v->itemsize != (is_index ? 8 : 4) || v->shape[0] != n || at < 0 || count < 0 || at + count > n) {
        PyErr_Format(PyExc_ValueError, "lattice kernel: %s must be %zd %s holding the tile's %zd from %zd", what, n,
                     is_index ? "int64" : "float32", count, at);
        return 0;
    }
    if (!is_index) return 1;
    const int64_t *p = (const int64_t *)v->buf + at;
    for (Py_ssize_t i = 0; i < count; i++)
        if (p[i] < 0 || p[i] >= limit) {
            PyErr_Format(PyExc_ValueError, "lattice kernel: %s holds %lld, outside [0, %zd)", what, (long long)p[i],
                         limit);
            return 0;
        }
    return 1;
}

static int weights(Py_buffer *v, Py_ssize_t n, const char *what) {
    if (!contiguous(v, what)) return 0;
    if (v->shape[0] != n) {
        PyErr_Format(PyExc_ValueError, "lattice kernel: %s must have %zd weights", what, n);
        return 0;
    }
    return 1;
}

static PyObject *tile(PyObject *self, PyObject *args) {
    PyObject *levels_obj, *layers_obj, *axes_obj, *out_obj;
    int sigmoid;
    Py_ssize_t x0, y0;
    if (!PyArg_ParseTuple(args, "O!O!pO!nnO", &PyTuple_Type, &levels_obj, &PyTuple_Type, &layers_obj, &sigmoid,
                          &PyTuple_Type, &axes_obj, &x0, &y0, &out_obj))
        return NULL;
    Py_ssize_t nlevels = PyTuple_GET_SIZE(levels_obj), nlayers = PyTuple_GET_SIZE(layers_obj);
    if (nlevels < 1 || nlevels > MAX_LEVELS || PyTuple_GET_SIZE(axes_obj) != nlevels || nlayers < 1 ||
        nlayers > MAX_LAYERS) {
        PyErr_SetString(PyExc_ValueError, "lattice kernel: levels, axes and layers disagree or are too many");
        return NULL;
    }
    Buffers bufs = {.n = 0};
    Level levels[MAX_LEVELS];
    Head head = {.n = (int)nlayers, .sigmoid = sigmoid};
    float *scratch = NULL;
    Py_buffer *out = get(&bufs, out_obj, "fB", 3, 1, "out");
    if (!out) goto fail;
    Py_ssize_t R = out->shape[0], C = out->shape[1], Cpad = (C + LANES - 1) / LANES * LANES;
    int is_u8 = out->itemsize == 1;
    if (out->shape[2] != 3 || out->strides[2] != out->itemsize || out->strides[1] != 3 * out->itemsize ||
        (!is_u8 && !contiguous(out, "out"))) {
        PyErr_SetString(PyExc_ValueError, "lattice kernel: out must be [R, C, 3] with contiguous rows");
        goto fail;
    }
    Py_ssize_t features = 0;
    for (Py_ssize_t l = 0; l < nlevels; l++) {
        PyObject *lt = PyTuple_GET_ITEM(levels_obj, l), *at = PyTuple_GET_ITEM(axes_obj, l);
        if (!PyTuple_Check(lt) || PyTuple_GET_SIZE(lt) != 3 || !PyTuple_Check(at) || PyTuple_GET_SIZE(at) != 6) {
            PyErr_SetString(PyExc_ValueError, "lattice kernel: a level is (table, scale, low), its axes six arrays");
            goto fail;
        }
        Level *lv = &levels[l];
        memset(lv, 0, sizeof *lv);
        Py_buffer *table = get(&bufs, PyTuple_GET_ITEM(lt, 0), "Bf", 3, 0, "a table");
        if (!table) goto fail;
        lv->F = table->shape[0], lv->ry = table->shape[1], lv->rx = table->shape[2];
        lv->sf = table->strides[0], lv->sr = table->strides[1], lv->sc = table->strides[2];
        if (table->itemsize == 1)
            lv->t8 = table->buf;
        else
            lv->t32 = table->buf;
        PyObject *scale = PyTuple_GET_ITEM(lt, 1), *low = PyTuple_GET_ITEM(lt, 2);
        if (scale != Py_None) {
            Py_buffer *s = get(&bufs, scale, "f", 1, 0, "a scale"), *lo = s ? get(&bufs, low, "f", 1, 0, "a low") : 0;
            if (!lo || !weights(s, lv->F, "a scale") || !weights(lo, lv->F, "a low")) goto fail;
            lv->scale = s->buf, lv->low = lo->buf;
        }
        Py_buffer *ax[6];
        static const char *names[6] = {"cols first", "cols after", "cols weight",
                                       "rows first", "rows after", "rows weight"};
        for (int i = 0; i < 6; i++) {
            ax[i] = get(&bufs, PyTuple_GET_ITEM(at, i), i % 3 == 2 ? "f" : "ql", 1, 0, names[i]);
            if (!ax[i]) goto fail;
        }
        Py_ssize_t cols = ax[0]->shape[0], rows = ax[3]->shape[0];
        for (int i = 0; i < 6; i++) {
            int is_index = i % 3 != 2, is_col = i < 3;
            if (!axis(ax[i], is_index, is_col ? cols : rows, is_col ? x0 : y0, is_col ? C : R,
                      is_col ? lv->rx : lv->ry, names[i]))
                goto fail;
        }
        lv->cf = (const int64_t *)ax[0]->buf + x0, lv->ca = (const int64_t *)ax[1]->buf + x0;
        lv->cw = (const float *)ax[2]->buf + x0;
        lv->rf = (const int64_t *)ax[3]->buf + y0, lv->ra = (const int64_t *)ax[4]->buf + y0;
        lv->rw = (const float *)ax[5]->buf + y0;
        features += lv->F;
    }
    Py_ssize_t in = (features + LANES - 1) / LANES * LANES;
    for (Py_ssize_t l = 0; l < nlayers; l++) {
        PyObject *pair = PyTuple_GET_ITEM(layers_obj, l);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_ValueError, "lattice kernel: a layer is (W, b)");
            goto fail;
        }
        Py_buffer *w = get(&bufs, PyTuple_GET_ITEM(pair, 0), "f", 2, 0, "a layer's W");
        Py_buffer *b = w ? get(&bufs, PyTuple_GET_ITEM(pair, 1), "f", 1, 0, "a layer's b") : NULL;
        if (!b || !contiguous(w, "a layer's W") || !contiguous(b, "a layer's b")) goto fail;
        Py_ssize_t o = w->shape[0];
        if (w->shape[1] != in || b->shape[0] != o || o > MAX_WIDTH || (l == nlayers - 1 && o != 3)) {
            PyErr_Format(PyExc_ValueError, "lattice kernel: layer %zd is [%zd, %zd], its input %zd wide", l,
                         w->shape[0], w->shape[1], in);
            goto fail;
        }
        head.in[l] = in, head.out[l] = o, head.w[l] = w->buf, head.b[l] = b->buf;
        in = o;
    }
    if (head.in[0] > MAX_WIDTH) {
        PyErr_SetString(PyExc_ValueError, "lattice kernel: too many features");
        goto fail;
    }
    if (R == 0 || C == 0) { /* nothing to write: no span of table columns to size the scratch by */
        release(&bufs);
        Py_RETURN_NONE;
    }
    Py_ssize_t floats = 0;
    for (Py_ssize_t l = 0; l < nlevels; l++) {
        Level *lv = &levels[l];
        lv->c0 = lv->rx, lv->c1 = 0;
        for (Py_ssize_t n = 0; n < C; n++) {
            Py_ssize_t a = lv->cf[n] < lv->ca[n] ? lv->cf[n] : lv->ca[n], b = lv->cf[n] ^ lv->ca[n] ^ a;
            lv->c0 = a < lv->c0 ? a : lv->c0, lv->c1 = b + 1 > lv->c1 ? b + 1 : lv->c1;
        }
        floats += 2 * lv->F * Cpad + 2 * C + (lv->c1 - lv->c0); /* two slots, the columns' cells, a row's span */
    }
    scratch = malloc(sizeof(float) * (floats ? floats : 1));
    if (!scratch) {
        PyErr_NoMemory();
        goto fail;
    }
    float *p = scratch;
    for (Py_ssize_t l = 0; l < nlevels; l++) {
        Level *lv = &levels[l];
        for (int s = 0; s < 2; s++) {
            lv->slot[s] = p, lv->slot_row[s] = -1;
            p += lv->F * Cpad;
        }
        lv->ci = (int32_t *)p, lv->cai = (int32_t *)p + C, p += 2 * C;
        lv->span = p, p += lv->c1 - lv->c0;
        for (Py_ssize_t n = 0; n < C; n++) {
            lv->ci[n] = (int32_t)(lv->cf[n] - lv->c0);
            lv->cai[n] = (int32_t)(lv->ca[n] - lv->c0);
        }
    }
    Py_BEGIN_ALLOW_THREADS;
    compute(levels, (int)nlevels, &head, features, R, C, Cpad, is_u8 ? NULL : out->buf, is_u8 ? out->buf : NULL,
            out->strides[0]);
    Py_END_ALLOW_THREADS;
    free(scratch);
    release(&bufs);
    Py_RETURN_NONE;
fail:
    free(scratch);
    release(&bufs);
    return NULL;
}

static PyMethodDef methods[] = {
    {"tile", tile, METH_VARARGS, "tile(levels, layers, sigmoid, axes, x0, y0, out): a lattice tile, head and all"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_latticekernel",
                                    "A dense grid model's axis-aligned tiles in one pass (lattice.py)", -1, methods};

PyMODINIT_FUNC PyInit__latticekernel(void) { return PyModule_Create(&module); }

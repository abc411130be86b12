/* An entropy-coded grid table decoded in one pass (modelrepo/tablecode.py, `decode`): the same values as its numpy
 * decoder, without its temporaries (a bit per byte of the unary stream, an int64 per value of its ends, int32 copies
 * of every value), which took a 4 MP model's load over a second and tens of megabytes at its peak.
 *
 * decode(data, sections, counts, block, f, ry, rx, centres) -> bytearray of f·ry·rx values, [F, ry, rx]:
 *   data      the coded bytes (their header already read by tablecode.layout)
 *   sections  (offset, length) per section: the parameters, the unary stream, the low bits of k = 1 … KMAX
 *   counts    blocks per parameter p = 0 … PARAMS − 1
 *   centres   F bytes, each channel's centre
 * Every read is checked against its section; ValueError for bytes that do not decode.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define KMAX 8
#define PARAMS (KMAX + 2)
#define SECTIONS (2 + KMAX)

typedef struct {
    const uint8_t *bytes;
    Py_ssize_t len;  /* bytes */
    Py_ssize_t next; /* the next byte to take into buf */
    uint64_t buf;    /* the next bits, most significant first; the bits below `have` are 0 */
    int have;
} Bits;

static inline void refill(Bits *s) {
    while (s->have <= 56 && s->next < s->len) {
        s->buf |= (uint64_t)s->bytes[s->next++] << (56 - s->have);
        s->have += 8;
    }
}

static inline void consume(Bits *s, int n) {
    s->buf = n >= 64 ? 0 : s->buf << n;
    s->have -= n;
}

static int read_pairs(PyObject *seq, Py_ssize_t *out, Py_ssize_t n, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: %zd entries expected", what, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

/* the zeros before the next 1 bit, and past it; -1 when the stream ends first */
static inline int64_t unary(Bits *s) {
    int64_t zeros = 0;
    for (;;) {
        if (s->buf != 0) { /* a 1 among the bits it has (those below `have` are 0) */
            int lead = __builtin_clzll(s->buf);
            zeros += lead;
            consume(s, lead + 1);
            return zeros;
        }
        zeros += s->have;
        s->have = 0;
        if (s->next >= s->len)
            return -1;
        refill(s);
    }
}

/* k ≤ 8 bits, most significant first (the caller checked that they are there) */
static inline uint32_t fixed(Bits *s, int k) {
    if (s->have < k)
        refill(s);
    uint32_t v = (uint32_t)(s->buf >> (64 - k));
    consume(s, k);
    return v;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer data;
    PyObject *sections_seq, *counts_seq;
    Py_ssize_t block, f, ry, rx;
    Py_buffer centres;
    if (!PyArg_ParseTuple(args, "y*OOnnnny*", &data, &sections_seq, &counts_seq, &block, &f, &ry, &rx, &centres))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t flat[2 * SECTIONS], counts[PARAMS];
    int32_t *order = NULL;
    if (read_pairs(sections_seq, flat, 2 * SECTIONS, "sections") < 0 || read_pairs(counts_seq, counts, PARAMS, "counts") < 0)
        goto done;
    if (block < 1 || f < 1 || ry < 1 || rx < 1 || centres.len != f || ry * rx > ((Py_ssize_t)1 << 28) / f) {
        PyErr_SetString(PyExc_ValueError, "a coded table of an impossible shape");
        goto done;
    }
    Py_ssize_t plane = ry * rx, channel_blocks = (plane + block - 1) / block, blocks = f * channel_blocks, total = 0;
    for (int p = 0; p < PARAMS; p++) {
        if (counts[p] < 0 || counts[p] > blocks) {
            PyErr_SetString(PyExc_ValueError, "a coded table whose block counts do not add up");
            goto done;
        }
        total += counts[p];
    }
    Bits sec[SECTIONS];
    for (int i = 0; i < SECTIONS; i++) {
        Py_ssize_t off = flat[2 * i], len = flat[2 * i + 1];
        if (off < 0 || len < 0 || off > data.len || len > data.len - off) {
            PyErr_SetString(PyExc_ValueError, "a coded table whose sections lie outside its bytes");
            goto done;
        }
        sec[i].bytes = (const uint8_t *)data.buf + off;
        sec[i].len = len;
        sec[i].next = 0;
        sec[i].buf = 0;
        sec[i].have = 0;
    }
    if (total != blocks || sec[0].len * 8 < blocks * 4 || block > ((Py_ssize_t)1 << 20)) {
        PyErr_SetString(PyExc_ValueError, "a coded table whose header does not add up");
        goto done;
    }
    for (int k = 1; k <= KMAX; k++) {
        if (sec[1 + k].len * 8 / k < counts[k + 1] * block) {
            PyErr_SetString(PyExc_ValueError, "a coded table whose low bits are short");
            goto done;
        }
    }
    /* the blocks in stream order: by parameter, then by index (numpy's stable argsort) */
    order = PyMem_Malloc(sizeof(int32_t) * (size_t)(blocks > 0 ? blocks : 1));
    if (order == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t start[PARAMS + 1], seen[PARAMS] = {0};
    start[0] = 0;
    for (int p = 0; p < PARAMS; p++)
        start[p + 1] = start[p] + counts[p];
    for (Py_ssize_t b = 0; b < blocks; b++) {
        uint8_t byte = sec[0].bytes[b >> 1];
        int p = (b & 1) ? (byte & 15) : (byte >> 4);
        if (p >= PARAMS || seen[p] == counts[p]) {
            PyErr_SetString(PyExc_ValueError, "a coded table whose block parameters disagree with its header");
            goto done;
        }
        order[start[p] + seen[p]++] = (int32_t)b;
    }
    out = PyByteArray_FromStringAndSize(NULL, f * plane);
    if (out == NULL)
        goto done;
    uint8_t *values = (uint8_t *)PyByteArray_AS_STRING(out);
    const uint8_t *centre = centres.buf;
    for (Py_ssize_t c = 0; c < f; c++) /* the zero blocks' values, and the default */
        memset(values + c * plane, centre[c], (size_t)plane);
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int p = 1; p < PARAMS && !failed; p++) {
        int k = p - 1;
        Bits *low = k ? &sec[1 + k] : NULL;
        if (low != NULL)
            refill(low);
        for (Py_ssize_t i = start[p]; i < start[p + 1] && !failed; i++) {
            Py_ssize_t b = order[i], c = b / channel_blocks, first = (b % channel_blocks) * block;
            uint8_t *row = values + c * plane;
            for (Py_ssize_t j = 0; j < block; j++) {
                int64_t high = unary(&sec[1]);
                if (high < 0) {
                    failed = 1;
                    break;
                }
                uint32_t u = ((uint32_t)high << k) | (k ? fixed(low, k) : 0);
                int32_t r = (int32_t)((u >> 1) ^ (0u - (u & 1)));
                if (first + j < plane)
                    row[first + j] = (uint8_t)(r + centre[c]);
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        Py_CLEAR(out);
        PyErr_SetString(PyExc_ValueError, "a coded table whose unary stream is short");
    }
done:
    PyMem_Free(order);
    PyBuffer_Release(&data);
    PyBuffer_Release(&centres);
    return out;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "decode(data, sections, counts, block, f, ry, rx, centres) -> bytearray"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tablecode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tablecode(void) { return PyModule_Create(&module); }

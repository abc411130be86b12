/* One channel of a context-coded table (modelrepo/ctxcode.py, IRC2) decoded in one pass of C: the same values, in
 * the same order, as modelrepo/ctxdecode.py's numpy decoder (numpy for the contexts, constriction's AnsCoder for the
 * values), at a fraction of its CPU: no temporaries per pass, and each value found from its quantile through a
 * 4,096-entry table instead of a binary search over its distribution.
 *
 * The coder is constriction's default ANS (32-bit words, a 64-bit state, 24-bit probabilities), read as its stack:
 * the stream's last words first. A distribution's cumulative frequencies are computed by ctxdecode.cdf exactly as
 * constriction quantises them, so both decoders agree bit for bit.
 *
 * decode_channel(words, pos, state, plan, glut, kinds, los, offsets, cdfs, centre, out, ry, rx) -> (pos, state)
 *   words    the stream (uint32); the words words[0 … pos) are still to read, the last first
 *   state    the coder's state (a Python int below 2^64)
 *   plan     int32 per pass: r0, c0, s, k, then k × (r1, c1, dr, dc) of its known neighbours, 4 + 16 a pass
 *   glut     the group of each activity 0 … ACTS − 1 (uint8), then the group of a value with no known neighbour
 *   kinds    per group: 0 no distribution, 1 one value (no bits), 2 a categorical (uint8)
 *   los      per group its lowest deviation (int32); offsets: where its cdf starts in cdfs (int32)
 *   cdfs     the groups' cumulative frequencies (uint32), n + 1 each, the last 2^24
 *   out      ry·rx bytes: the channel's values, its deviations plus `centre`
 * ValueError for a stream that does not decode to values in 0 … 255 (the caller checks the CRC and the stream end).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION 24
#define ACTS (4 * 255 + 1)
#define PASS 20
#define TAB_BITS 12

static int get_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t min_len, const char *what) {
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    if (view->len < min_len) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, %zd expected", what, view->len, min_len);
        return -1;
    }
    return 0;
}

static PyObject *decode_channel(PyObject *self, PyObject *args) {
    PyObject *o_words, *o_plan, *o_glut, *o_kinds, *o_los, *o_offsets, *o_cdfs, *o_out;
    Py_ssize_t pos, ry, rx;
    unsigned long long state_in;
    int centre;
    if (!PyArg_ParseTuple(args, "OnKOOOOOOiOnn", &o_words, &pos, &state_in, &o_plan, &o_glut, &o_kinds, &o_los,
                          &o_offsets, &o_cdfs, &centre, &o_out, &ry, &rx))
        return NULL;
    Py_buffer b[8];
    PyObject *objs[8] = {o_words, o_plan, o_glut, o_kinds, o_los, o_offsets, o_cdfs, o_out};
    int got = 0;
    PyObject *result = NULL;
    int16_t *dev = NULL; /* the deviations from the centre, each checked to leave the value in 0 … 255 */
    int32_t *order = NULL;
    uint8_t *g = NULL;
    uint16_t *tabs = NULL;
    for (; got < 8; got++)
        if (get_buffer(objs[got], &b[got], got == 7, got == 7 ? ry * rx : 0, "decode_channel") < 0)
            goto done;
    const uint32_t *words = b[0].buf;
    const int32_t *plan = b[1].buf;
    const uint8_t *glut = b[2].buf, *kinds = b[3].buf;
    const int32_t *los = b[4].buf, *offsets = b[5].buf;
    const uint32_t *cdfs = b[6].buf;
    uint8_t *out = b[7].buf;
    Py_ssize_t passes = b[1].len / (PASS * 4), groups = b[3].len;
    if (pos < 0 || pos > b[0].len / 4 || b[2].len != ACTS + 1 || b[4].len != 4 * groups || b[5].len != 4 * groups) {
        PyErr_SetString(PyExc_ValueError, "decode_channel: inconsistent arguments");
        goto done;
    }
    /* each categorical's quantile table: the symbol of the quantile j << (PRECISION − TAB_BITS), its first guess */
    tabs = malloc(sizeof(uint16_t) * ((size_t)groups << TAB_BITS) + 1);
    Py_ssize_t most = 1; /* the cells of the largest pass: about a quarter of the table */
    for (Py_ssize_t p = 0; p < passes; p++) {
        const int32_t *d = plan + p * PASS;
        if (d[0] < ry && d[1] < rx && ((ry - 1 - d[0]) / d[2] + 1) * ((rx - 1 - d[1]) / d[2] + 1) > most)
            most = ((ry - 1 - d[0]) / d[2] + 1) * ((rx - 1 - d[1]) / d[2] + 1);
    }
    dev = calloc((size_t)(ry * rx) + 1, sizeof(int16_t));
    order = malloc(sizeof(int32_t) * (size_t)most);
    g = malloc((size_t)most);
    if (!tabs || !dev || !order || !g) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < groups; k++) {
        if (kinds[k] != 2)
            continue;
        const uint32_t *cdf = cdfs + offsets[k];
        Py_ssize_t s = 0;
        for (uint32_t j = 0; j < (1u << TAB_BITS); j++) {
            uint32_t q = j << (PRECISION - TAB_BITS);
            while (cdf[s + 1] <= q)
                s++;
            tabs[((size_t)k << TAB_BITS) + j] = (uint16_t)s;
        }
    }
    uint64_t state = state_in;
    for (Py_ssize_t p = 0; p < passes; p++) {
        const int32_t *d = plan + p * PASS;
        int32_t r0 = d[0], c0 = d[1], s = d[2], nk = d[3];
        Py_ssize_t nr = r0 < ry ? (ry - 1 - r0) / s + 1 : 0, nc = c0 < rx ? (rx - 1 - c0) / s + 1 : 0;
        Py_ssize_t counts[256] = {0};
        /* the columns c_lo … c_hi − 1 whose every neighbour's column is inside the table */
        Py_ssize_t c_lo = 0, c_hi = nc;
        for (int32_t e = 0; e < nk; e++) {
            Py_ssize_t off = d[4 + 4 * e + 1] + (Py_ssize_t)d[4 + 4 * e + 3] * s;
            while (c_lo < nc && off + c_lo * s < 0)
                c_lo++;
            while (c_hi > c_lo && off + (c_hi - 1) * s >= rx)
                c_hi--;
        }
        for (Py_ssize_t r = 0; r < nr; r++) {
            const int16_t *row[4] = {dev, dev, dev, dev};
            Py_ssize_t coff[4] = {0, 0, 0, 0};
            int rows_in = nk == 4;
            for (int32_t e = 0; e < nk; e++) {
                const int32_t *nb = d + 4 + 4 * e;
                Py_ssize_t rr = nb[0] + (r + nb[2]) * (Py_ssize_t)s;
                rows_in &= rr >= 0 && rr < ry;
                row[e] = dev + (rr >= 0 && rr < ry ? rr * rx : 0);
                coff[e] = nb[1] + (Py_ssize_t)nb[3] * s;
            }
            uint8_t *gr = g + r * nc;
            for (Py_ssize_t c = 0; c < nc; c++) {
                if (rows_in && c == c_lo && c_lo < c_hi) { /* all four neighbours inside: the mean is the sum */
                    for (; c < c_hi; c++) {
                        Py_ssize_t cs = c * s;
                        int32_t a = row[0][coff[0] + cs], b2 = row[1][coff[1] + cs];
                        int32_t a3 = row[2][coff[2] + cs], a4 = row[3][coff[3] + cs];
                        int32_t total = abs(a) + abs(b2) + abs(a3) + abs(a4);
                        uint8_t k = glut[total < ACTS ? total : ACTS - 1];
                        gr[c] = k;
                        counts[k]++;
                    }
                    if (c >= nc)
                        break;
                }
                int32_t total = 0, count = 0;
                for (int32_t e = 0; e < nk; e++) {
                    const int32_t *nb = d + 4 + 4 * e;
                    Py_ssize_t rr = nb[0] + (r + nb[2]) * (Py_ssize_t)s, cc = coff[e] + c * s;
                    if (rr >= 0 && rr < ry && cc >= 0 && cc < rx) {
                        int32_t v = row[e][cc];
                        total += v < 0 ? -v : v;
                        count++;
                    }
                }
                int32_t act = count ? (4 * total) / count : ACTS;
                uint8_t k = glut[act < ACTS ? act : (count ? ACTS - 1 : ACTS)];
                gr[c] = k;
                counts[k]++;
            }
        }
        Py_ssize_t start[256], at = 0;
        for (int k = 0; k < 256; k++) {
            start[k] = at;
            at += counts[k];
            if (counts[k] && (k >= groups || kinds[k] == 0)) {
                PyErr_SetString(PyExc_ValueError, "values in a context that has no distribution");
                goto done;
            }
        }
        for (Py_ssize_t r = 0, i = 0; r < nr; r++) /* each group's cells in raster order: where its values go */
            for (Py_ssize_t c = 0; c < nc; c++, i++)
                order[start[g[i]]++] = (int32_t)((r0 + r * s) * rx + c0 + c * s);
        for (Py_ssize_t k = 0, j = 0; k < groups; k++) {
            Py_ssize_t end = j + counts[k];
            if (kinds[k] == 1) {
                if (counts[k] && (uint32_t)(los[k] + centre) > 255)
                    goto out_of_range;
                for (; j < end; j++)
                    dev[order[j]] = (int16_t)los[k];
                continue;
            }
            const uint32_t *cdf = cdfs + offsets[k];
            const uint16_t *tab = tabs + ((size_t)k << TAB_BITS);
            for (; j < end; j++) {
                uint32_t q = (uint32_t)(state & ((1u << PRECISION) - 1));
                uint32_t sym = tab[q >> (PRECISION - TAB_BITS)];
                while (cdf[sym + 1] <= q)
                    sym++;
                state = (state >> PRECISION) * (uint64_t)(cdf[sym + 1] - cdf[sym]) + (q - cdf[sym]);
                if (state < ((uint64_t)1 << 32) && pos > 0)
                    state = (state << 32) | words[--pos];
                int32_t v = los[k] + (int32_t)sym;
                if ((uint32_t)(v + centre) > 255)
                    goto out_of_range;
                dev[order[j]] = (int16_t)v;
            }
        }
    }
    for (Py_ssize_t i = 0; i < ry * rx; i++)
        out[i] = (uint8_t)(dev[i] + centre);
    result = Py_BuildValue("nK", pos, (unsigned long long)state);
    goto done;
out_of_range:
    PyErr_SetString(PyExc_ValueError, "values that leave 0 … 255");
done:
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&b[i]);
    free(tabs);
    free(dev);
    free(order);
    free(g);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_channel", decode_channel, METH_VARARGS, "One channel of a context-coded table (see the file's head)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ctxcode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__ctxcode(void) { return PyModule_Create(&module); }

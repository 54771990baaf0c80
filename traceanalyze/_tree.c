/* The C path of linking's call tree: each CPU interval's depth and parent in one pass.
 *
 * traceanalyze.link defines both figures with columnar Polars steps (a count over sorted ends,
 * an as-of join per thread and level); that stays the reference and the fallback when this
 * extension is not built. Here the same definitions are computed in one walk over the
 * intervals in call order (by thread, start, longest first), which costs a fraction of the
 * sorts and joins, most of all on the many small traces of a ranks folder.
 *
 * Definitions (link.nesting_depth and link._parent_ids):
 * - an earlier interval j of the thread is still open at interval i's start S_i unless it
 *   ended by then: E_j < S_i, or E_j == S_i with a length above zero (a zero-length interval
 *   stays open at its own instant), where E_j = start + max(dur, 0) (a null dur counts as 0);
 * - depth_i = the number of those still open;
 * - parent_i = the last interval before i (call order) on its thread at depth depth_i - 1,
 *   kept only when its dur is known and start + dur >= S_i.
 *
 * The caller checks that starts and durations are far from the 64-bit limits (sums cannot
 * overflow) and that no start is null.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

/* An open interval: its end, and whether it has zero length (it then closes after a start at
 * its end). Ordered as the key 2 * end + zero. */
typedef struct {
    int64_t end;
    int zero;
} Open;

static int opens_later(const Open *a, const Open *b) {
    return a->end > b->end || (a->end == b->end && a->zero > b->zero);
}

static int closed_by(const Open *o, int64_t start) {
    return o->end < start || (o->end == start && !o->zero);
}

/* A binary min-heap of the open intervals of the current thread. */
static void heap_push(Open *heap, Py_ssize_t *size, Open item) {
    Py_ssize_t i = (*size)++;
    while (i > 0) {
        Py_ssize_t up = (i - 1) / 2;
        if (!opens_later(&heap[up], &item)) break;
        heap[i] = heap[up];
        i = up;
    }
    heap[i] = item;
}

static void heap_pop(Open *heap, Py_ssize_t *size) {
    Open last = heap[--(*size)];
    Py_ssize_t i = 0, n = *size;
    for (;;) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && opens_later(&heap[child], &heap[child + 1])) child++;
        if (!opens_later(&last, &heap[child])) break;
        heap[i] = heap[child];
        i = child;
    }
    if (n) heap[i] = last;
}

static void walk(Py_ssize_t n, const int64_t *thread, const int64_t *start, const int64_t *dur,
                 const uint8_t *has_dur, int32_t *depth, int64_t *parent, Open *heap,
                 int64_t *last_at) {
    Py_ssize_t open = 0, deepest = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i == 0 || thread[i] != thread[i - 1]) {
            open = 0;
            for (Py_ssize_t d = 0; d <= deepest; d++) last_at[d] = -1;
            deepest = -1;
        }
        int64_t s = start[i];
        while (open && closed_by(&heap[0], s)) heap_pop(heap, &open);
        Py_ssize_t d = open;
        depth[i] = (int32_t)d;
        int64_t p = d ? last_at[d - 1] : -1;
        if (p >= 0 && !(has_dur[p] && start[p] + dur[p] >= s)) p = -1;
        parent[i] = p;
        last_at[d] = i;
        if (d > deepest) deepest = d;
        int64_t length = has_dur[i] && dur[i] > 0 ? dur[i] : 0;
        Open item = {s + length, length == 0};
        heap_push(heap, &open, item);
    }
}

static int check_length(Py_buffer *b, Py_ssize_t n, Py_ssize_t itemsize, const char *what) {
    if (b->len != n * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s has %zd bytes, expected %zd", what, b->len,
                     n * itemsize);
        return -1;
    }
    return 0;
}

static PyObject *call_tree(PyObject *module, PyObject *args) {
    Py_buffer thread, start, dur, has_dur;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &thread, &start, &dur, &has_dur)) return NULL;
    Py_ssize_t n = start.len / 8;
    int32_t *depth = NULL;
    int64_t *parent = NULL, *last_at = NULL;
    Open *heap = NULL;
    if (check_length(&start, n, 8, "start") || check_length(&thread, n, 8, "thread") ||
        check_length(&dur, n, 8, "dur") || check_length(&has_dur, n, 1, "has_dur"))
        goto done;
    /* at least one element each: malloc(0) may return NULL */
    depth = malloc((size_t)(n + 1) * sizeof *depth);
    parent = malloc((size_t)(n + 1) * sizeof *parent);
    last_at = malloc((size_t)(n + 1) * sizeof *last_at);
    heap = malloc((size_t)(n + 1) * sizeof *heap);
    if (!depth || !parent || !last_at || !heap) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    walk(n, thread.buf, start.buf, dur.buf, has_dur.buf, depth, parent, heap, last_at);
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(y#y#)", (const char *)depth, n * (Py_ssize_t)sizeof *depth,
                           (const char *)parent, n * (Py_ssize_t)sizeof *parent);
done:
    free(depth);
    free(parent);
    free(last_at);
    free(heap);
    PyBuffer_Release(&thread);
    PyBuffer_Release(&start);
    PyBuffer_Release(&dur);
    PyBuffer_Release(&has_dur);
    return result;
}

static PyMethodDef tree_methods[] = {
    {"call_tree", call_tree, METH_VARARGS,
     "call_tree(thread, start, dur, has_dur) -> (depth int32 bytes, parent int64 bytes, -1 "
     "for none): int64 buffers (has_dur: uint8) of intervals in call order."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef tree_module = {PyModuleDef_HEAD_INIT, "_tree", NULL, -1, tree_methods};

PyMODINIT_FUNC PyInit__tree(void) { return PyModule_Create(&tree_module); }

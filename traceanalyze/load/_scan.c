/* Fast path of the loader: Chrome/Kineto trace JSON -> typed columns, one chunk at a time.
 *
 * The scanner reads the traceEvents array straight into column buffers (no Python object per
 * event), keeps only the fields traceanalyze uses, and validates everything else it skips as
 * strict JSON. It handles the shapes Kineto writes. Whenever it meets anything else (an error,
 * an unusual type, B/E phases, a number it cannot convert exactly) it raises Unsupported, and
 * the caller loads the file with the msgspec path, which is the reference for every result and
 * every error message. So this file never decides what is an error; it only declines.
 *
 * Parsing runs without the GIL. feed() takes a buffer holding the next bytes of the document
 * and returns how many it consumed: it stops before the first top-level item (an event, or a
 * key of the top-level object) that is not complete in the buffer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__) || defined(_M_X64)
#define HAVE_SSE2 1
#include <emmintrin.h> /* part of every x86-64 CPU: no runtime dispatch needed */
#endif

/* Lowest set bit and branch hints, where the compiler has them (GCC, Clang; MSVC). */
#if defined(_MSC_VER)
#include <intrin.h>
static __inline int ctz32(unsigned x) { unsigned long i; _BitScanForward(&i, x); return (int)i; }
static __inline int ctz64(unsigned long long x) {
    unsigned long i;
    _BitScanForward64(&i, x);
    return (int)i;
}
#define LIKELY(x) (x)
#define ALWAYS_INLINE __forceinline
#else
#define ctz32(x) __builtin_ctz(x)
#define ctz64(x) __builtin_ctzll(x)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define ALWAYS_INLINE __attribute__((always_inline))
#endif

/* ---- growable buffers ------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *data = realloc(b->data, cap);
    if (!data) return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, size_t n) {
    if (n == 0) return 0;
    if (buf_reserve(b, n)) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static void buf_free(Buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- string interning ------------------------------------------------------------------- */

/* Distinct byte strings, numbered in order of first appearance. */
typedef struct {
    Buf arena;          /* the strings, back to back */
    Buf offsets;        /* uint64 start of each string in arena; one extra at the end */
    uint32_t *slots;    /* open addressing: id + 1, 0 = empty */
    uint64_t *hashes;
    size_t nslots, count;
} Intern;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 1099511628211ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    h ^= h >> 32;
    return h;
}

static int intern_init(Intern *t) {
    memset(t, 0, sizeof(*t));
    t->nslots = 1024;
    t->slots = calloc(t->nslots, sizeof(uint32_t));
    t->hashes = calloc(t->nslots, sizeof(uint64_t));
    uint64_t zero = 0;
    if (!t->slots || !t->hashes) return -1;
    return buf_put(&t->offsets, &zero, sizeof zero);
}

static void intern_free(Intern *t) {
    buf_free(&t->arena);
    buf_free(&t->offsets);
    free(t->slots);
    free(t->hashes);
    t->slots = NULL;
    t->hashes = NULL;
}

static const char *intern_str(const Intern *t, uint32_t id, size_t *n) {
    const uint64_t *off = (const uint64_t *)t->offsets.data;
    *n = off[id + 1] - off[id];
    return t->arena.data ? t->arena.data + off[id] : ""; /* no arena yet: only "" is there */
}

static int intern_grow(Intern *t) {
    size_t n = t->nslots * 2;
    uint32_t *slots = calloc(n, sizeof(uint32_t));
    uint64_t *hashes = calloc(n, sizeof(uint64_t));
    if (!slots || !hashes) {
        free(slots);
        free(hashes);
        return -1;
    }
    for (size_t i = 0; i < t->nslots; i++) {
        if (!t->slots[i]) continue;
        size_t j = t->hashes[i] & (n - 1);
        while (slots[j]) j = (j + 1) & (n - 1);
        slots[j] = t->slots[i];
        hashes[j] = t->hashes[i];
    }
    free(t->slots);
    free(t->hashes);
    t->slots = slots;
    t->hashes = hashes;
    t->nslots = n;
    return 0;
}

/* The id of s[0:n]; *fresh is set when it was not there before. -1 on memory failure. */
static int64_t intern_add(Intern *t, const char *s, size_t n, int *fresh) {
    uint64_t h = hash_bytes(s, n);
    size_t mask = t->nslots - 1, j = h & mask;
    *fresh = 0;
    while (t->slots[j]) {
        if (t->hashes[j] == h) {
            size_t len;
            uint32_t id = t->slots[j] - 1;
            const char *have = intern_str(t, id, &len);
            if (len == n && (n == 0 || memcmp(have, s, n) == 0)) return id;
        }
        j = (j + 1) & mask;
    }
    uint64_t end = t->arena.len + n;
    if (buf_put(&t->arena, s, n) || buf_put(&t->offsets, &end, sizeof end)) return -1;
    t->slots[j] = (uint32_t)(t->count + 1);
    t->hashes[j] = h;
    *fresh = 1;
    int64_t id = (int64_t)t->count++;
    if (t->count * 2 > t->nslots && intern_grow(t)) return -1;
    return id;
}

/* ---- columns ------------------------------------------------------------------------------ */

/* Scalar columns carry a tag per row: what the JSON value was. */
enum { TAG_NULL = 0, TAG_INT = 1, TAG_FLOAT = 2, TAG_STR = 3 };

/* The columns, kinds and arg keys: generated from traceanalyze/load/scan_tables.py. */
#include "_scan_tables.h"
/* Event.touched has a bit per tagged column. */
typedef char tagged_columns_fit_a_64_bit_mask[N_TAGGED <= 64 ? 1 : -1];

typedef struct {
    int kind;
    uint32_t cat;
    size_t rows;
    size_t cap_rows;         /* rows every column of the part has room for (see store) */
    /* the tagged columns of the kind (a bit each), and those with buffers: an args column gets
     * its buffers at its first value (see store); until then every row of it is null */
    uint64_t wanted, dense;
    Buf name, phase;         /* uint32 ids in the names table */
    Buf ts, dur;             /* int64 nanoseconds */
    Buf value[N_TAGGED];     /* int64 (or double bits) */
    Buf tag[N_TAGGED];       /* uint8 */
    Buf raw[N_RAW];          /* int32 id in the raws table, -1 when absent */
} Part;

/* One event being parsed. */
typedef struct {
    int64_t value[N_TAGGED];
    uint8_t tag[N_TAGGED];
    uint64_t touched;        /* a bit per args column set since the last reset */
    int32_t raw[N_RAW];
    int64_t ts, dur;
    uint32_t name, phase, cat;
    int has_cat;
    const char *args;        /* the args value, kept for a second look when cat came late */
    size_t args_len;
    int ts_simple;
} Event;

/* ---- learned separators ------------------------------------------------------------------ */

/* The bytes from the end of an object's value (or its opening brace) to the start of the next
 * value: white space, a comma, white space, the quoted key, white space, a colon, white space.
 * An exporter writes them the same way each time (Kineto: `,\n    "ts": `), so the scanner
 * keeps the last ones it parsed at each position of an event and of each kind's args, and
 * where the next bytes are equal it takes the key as known and goes on at its value: one
 * 32-byte compare for what was white space, comma, key and colon parsed byte by byte and the
 * key's name compared with each known one. Bytes equal to a sequence the parser accepted
 * parse the same, so nothing is validated less. */
#define SEP_MAX 32   /* longer separators are parsed each time */
#define SEP_SLOTS 16 /* positions remembered per object kind */
/* bytes that must follow a separator for the compare to be tried: its 32 loaded bytes and
 * the first byte of the value */
#define SEP_ROOM (SEP_MAX + 16)

typedef struct {
    unsigned char bytes[SEP_MAX];
    uint8_t len;             /* 0: none learned */
    int8_t key;              /* an event key (EK_*) or an args reader (A_*) */
    int8_t slot;             /* for args: the reader's column */
} Sep;

/* The two separators last learned at one position, the latest first: events of two layouts
 * interleave (a recorded op with shapes, one without), and one each kept both matching. */
typedef struct {
    Sep way[2];
} SepSlot;

/* Values remembered per (event name, args position): the last two a position held, for the
 * values that are arrays, objects or strings (see memo_value). */
#define MEMO_BITS 12
typedef struct {
    uint32_t key;            /* see memo_value */
    uint32_t id[2];          /* in the raws or the skipped table; the latest first */
    uint8_t filled;
} Memo;
/* Bytes of skipped values the scanner keeps for the memo at most (beyond it, not kept). */
#define SKIPPED_LIMIT (1u << 20)

/* The event keys the scanner reads. */
enum { EK_OTHER, EK_PH, EK_CAT, EK_NAME, EK_PID, EK_TID, EK_TS, EK_DUR, EK_ID, EK_ARGS };

/* ---- the scanner object ------------------------------------------------------------------- */

enum { S_START, S_TOP_KEY, S_TOP_NEXT, S_EVENTS_FIRST, S_EVENTS_ITEM, S_EVENTS_NEXT,
       S_TOP_AFTER_EVENTS, S_DONE };

typedef struct {
    PyObject_HEAD
    int state;
    int bare;
    int seen_events;
    Intern names, raws, cats;
    Intern skipped;          /* skipped args values that are arrays, objects or strings */
    Memo memo[1u << MEMO_BITS];
    Buf cat_kinds;           /* int32 kind per cat id */
    Buf counts;              /* int64 events per cat id */
    Part *parts;
    size_t nparts;
    Buf part_of;             /* int32 part index per (cat id * 8 + kind), -1 = none */
    Buf header;              /* "key": value pairs of the top-level object, comma separated */
    /* the caller's table, category -> kind (with KIND_LEGACY), copied at init so that a
     * scan never needs the GIL: a thread that took it for each new category could wait for
     * another thread's Python work (building the pieces of its chunk) to let it go */
    Intern known;
    Buf known_kinds;         /* int32 kind per known id; ids past it are categories not known */
    size_t nknown;
    int64_t events;
    uint32_t memory_name;    /* names id of "[memory]" (profile_memory's instant events) */
    /* names id + 1 of each one-byte phase seen (0: not yet): every event has a phase, and
     * hashing it into names each time cost a few percent of the scan */
    uint32_t phase_ids[128];
    /* the category of the event before, and its id: consecutive events mostly share it */
    char last_cat[32];
    size_t last_cat_len;
    int64_t last_cat_id;
    Event event;             /* the event being parsed (reset field by field, see event()) */
    SepSlot event_seps[SEP_SLOTS];              /* per key position in an event */
    SepSlot args_seps[N_KIND_CODES][SEP_SLOTS]; /* per args kind and key position */
    int taken;               /* result() handed the columns over: no more feeding */
    const char *fail;        /* why the scan declined (static text) */
    size_t fail_at;
} Scanner;

static PyObject *Unsupported;

/* ---- low-level JSON ---------------------------------------------------------------------- */

typedef struct {
    const char *p, *end;
    Scanner *s;
} Cur;

#define FAIL(c, why) do { (c)->s->fail = (why); return -1; } while (0)
/* -2 means "the buffer ends inside this item": not an error unless the input is complete. */
#define MORE(c) do { return -2; } while (0)

/* JSON white space: space, tab, line feed, carriage return (the only bytes at or below ' '
 * that may come between tokens; the others are errors the parser reports where it stops). */
static inline int is_ws(unsigned char ch) {
    return ch <= ' ' && ((1ULL << ch) & ((1ULL << ' ') | (1ULL << '\t') | (1ULL << '\n') | (1ULL << '\r')));
}

static inline void ws(Cur *c) {
    const char *p = c->p, *end = c->end;
    /* most tokens follow one another or one space: decided on the first byte */
    if (p >= end || !is_ws((unsigned char)*p)) return;
    p++;
    /* and the one space of ", " and ": " on the second (a vector load for it cost more) */
    if (p < end && !is_ws((unsigned char)*p)) {
        c->p = p;
        return;
    }
#if defined(HAVE_SSE2)
    /* indented traces: a line feed and a run of spaces, sixteen bytes at a time */
    const __m128i space = _mm_set1_epi8(' '), tab = _mm_set1_epi8('\t'),
                  lf = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r');
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i blank = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, space), _mm_cmpeq_epi8(v, lf)),
                                     _mm_or_si128(_mm_cmpeq_epi8(v, tab), _mm_cmpeq_epi8(v, cr)));
        unsigned other = (unsigned)_mm_movemask_epi8(blank) ^ 0xFFFFu;
        if (other) {
            c->p = p + ctz32(other);
            return;
        }
        p += 16;
    }
#endif
    while (p < end && is_ws((unsigned char)*p)) p++;
    c->p = p;
}

/* Validate one UTF-8 sequence starting at p (p[0] >= 0x80); returns its length or 0. */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    int n;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; }
    else return 0;
    if (end - p < n) return -1;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return n;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int hex4(const char *p) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = (v << 4) | h;
    }
    return v;
}

/* The first byte at or after p that is a quote, a backslash, a control or a non-ASCII byte,
 * or end when none is: sixteen bytes at a time where SSE2 is there (a signed compare below 0x20
 * flags control and non-ASCII bytes alike), then eight (a word with none of them), then one. */
static inline const unsigned char *plain_run(const unsigned char *p, const unsigned char *end) {
#if defined(HAVE_SSE2)
    const __m128i quotes = _mm_set1_epi8('"'), slashes = _mm_set1_epi8('\\'),
                  space = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quotes), _mm_cmpeq_epi8(v, slashes)),
                                   _mm_cmplt_epi8(v, space));
        int mask = _mm_movemask_epi8(hit);
        if (mask) return p + ctz32((unsigned)mask);
        p += 16;
    }
#endif
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
        uint64_t quote = w ^ (ones * '"'), slash = w ^ (ones * '\\');
        uint64_t special = ((quote - ones) & ~quote) | ((slash - ones) & ~slash) |
                           (w - ones * 0x20) | w;
        if (special & highs) break;
        p += 8;
    }
    while (p < end && *p >= 0x20 && *p != '"' && *p != '\\' && *p < 0x80) p++;
    return p;
}

/* The rest of a string from p, the first byte of it that plain_run stopped at (an escape, a
 * non-ASCII or control byte, or the end of the buffer): out of line, as most strings never
 * get here. Returns 0 with c->p past the closing quote, *plain cleared when it saw escapes. */
static int string_rest(Cur *c, const unsigned char *p, int *plain) {
    const unsigned char *end = (const unsigned char *)c->end;
    for (;;) {
        if (p >= end) MORE(c);
        unsigned char ch = *p;
        if (ch == '"') break;
        if (ch == '\\') {
            *plain = 0;
            if (end - p < 2) MORE(c);
            char e = (char)p[1];
            if (e == 'u') {
                if (end - p < 6) MORE(c);
                int v = hex4((const char *)p + 2);
                if (v < 0) FAIL(c, "bad \\u escape");
                if (v >= 0xD800 && v <= 0xDBFF) {
                    if (end - p < 12) MORE(c);
                    int lo = (p[6] == '\\' && p[7] == 'u') ? hex4((const char *)p + 8) : -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) FAIL(c, "lone surrogate");
                    p += 12;
                } else if (v >= 0xDC00 && v <= 0xDFFF) {
                    FAIL(c, "lone surrogate");
                } else {
                    p += 6;
                }
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
                       e == 'r' || e == 't') {
                p += 2;
            } else {
                FAIL(c, "bad escape");
            }
        } else if (ch < 0x20) {
            FAIL(c, "control character in a string");
        } else if (ch >= 0x80) {
            int n = utf8_len(p, end);
            if (n < 0) MORE(c);
            if (n == 0) FAIL(c, "invalid UTF-8");
            p += n;
        }
        p = plain_run(p, end);
    }
    c->p = (const char *)p + 1;
    return 0;
}

/* A string at c->p (on the opening quote): validated; start and len give its raw contents;
 * *plain says it has no escapes. Inlined: most strings are short plain ASCII, found by one
 * plain_run. */
static inline int string(Cur *c, const char **start, size_t *len, int *plain) {
    const unsigned char *p = (const unsigned char *)c->p + 1, *end = (const unsigned char *)c->end;
    *start = (const char *)p;
    *plain = 1;
#if defined(HAVE_SSE2)
    /* A string shorter than sixteen bytes (most keys and values): its closing quote from one
     * vector, when no escape, control or non-ASCII byte comes before it. */
    if (LIKELY(end - p >= 16)) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        unsigned quote = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')));
        unsigned other = (unsigned)_mm_movemask_epi8(
            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\\')), _mm_cmplt_epi8(v, _mm_set1_epi8(0x20))));
        if (quote && !(other & ((quote & -quote) - 1))) {
            p += ctz32(quote);
            c->p = (const char *)p + 1;
            *len = (size_t)((const char *)p - *start);
            return 0;
        }
    }
#endif
    p = plain_run(p, end);
    if (LIKELY(p < end && *p == '"')) {
        c->p = (const char *)p + 1;
    } else {
        int rc = string_rest(c, p, plain);
        if (rc) return rc;
    }
    *len = (size_t)(c->p - 1 - *start);
    return 0;
}

/* A JSON number at c->p, checked against the grammar. */
typedef struct {
    const char *text;
    size_t len;
    int negative, has_frac, has_exp, int_digits, frac_digits;
    uint64_t int_value;      /* valid when int_digits <= 18 (read only then: it wraps past 19) */
    uint64_t frac_value;     /* first 3 fraction digits, scaled to thousandths */
} Number;

/* How many of the 8 bytes at p are digits before the first other byte (0-8); *x gets the
 * bytes minus '0' (a digit's value in each of those). Eight bytes at once: read a digit at a
 * time, the timestamps and durations (13-16 digits) were a fifth of the time of a Python
 * function's event, much of it the loop's mispredicted exit. */
static inline int digit_run8(const char *p, uint64_t *x) {
    uint64_t w;
    memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w); /* the first byte lowest, as the arithmetic here assumes */
#endif
    uint64_t v = w ^ 0x3030303030303030ULL;
    /* a byte is a digit when v < 10: no high nibble, and no carry into it from adding 6 (a
     * carry out of a byte only reaches the bytes after it, past the first non-digit) */
    uint64_t other = (v | (v + 0x0606060606060606ULL)) & 0xF0F0F0F0F0F0F0F0ULL;
    *x = v;
    return other ? ctz64(other) >> 3 : 8;
}

/* The value of the first k (1-8) digits of x (as digit_run8 gives them). */
static inline uint64_t digits_value(uint64_t x, int k) {
    uint64_t v = x << (8 * (8 - k)); /* the k digits last: the bytes before them count as 0 */
    v = (v * 10 + (v >> 8)) & 0x00FF00FF00FF00FFULL;
    v = (v * 100 + (v >> 16)) & 0x0000FFFF0000FFFFULL;
    return (v * 10000 + (v >> 32)) & 0xFFFFFFFFULL;
}

/* The first byte at or after p that is no digit (or end). */
static inline const char *skip_digits(const char *p, const char *end) {
    uint64_t x;
    int k = 8;
    while (k == 8 && end - p >= 8) {
        k = digit_run8(p, &x);
        p += k;
    }
    if (k == 8)
        while (p < end && (unsigned)(*p - '0') <= 9) p++;
    return p;
}

static const uint64_t POW10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

/* Always inlined into its three callers: their Number then stays in registers, where a call
 * stored its fields and the caller read them back (6% of the scan, in one process). */
static inline ALWAYS_INLINE int number(Cur *c, Number *n) {
    /* locals, not n's fields, in the digit loops: a store through n could alias the input
     * bytes (char data), which made every digit a load-store round trip */
    const char *p = c->p, *end = c->end;
    int negative = 0, int_digits = 0, frac_digits = 0, has_frac = 0, has_exp = 0;
    uint64_t int_value = 0, frac_value = 0;
    if (p < end && *p == '-') { negative = 1; p++; }
    if (p >= end) MORE(c);
    if (*p == '0') {
        p++;
        int_digits = 1;
    } else if (*p >= '1' && *p <= '9') {
        int k = 8;
        /* past 19 digits the value wraps: it is read only for up to 18 (see Number) */
        while (k == 8 && end - p >= 8) {
            uint64_t x;
            k = digit_run8(p, &x);
            int_value = int_value * POW10[k] + (k ? digits_value(x, k) : 0);
            int_digits += k;
            p += k;
        }
        if (k == 8) {
            while (p < end && (unsigned)(*p - '0') <= 9) {
                if (int_digits < 19) int_value = int_value * 10 + (uint64_t)(*p - '0');
                int_digits++;
                p++;
            }
        }
    } else {
        FAIL(c, "bad number");
    }
    if (p < end && *p == '.') {
        p++;
        has_frac = 1;
        const char *digits = p;
        if (end - p >= 8) {
            uint64_t x;
            int k = digit_run8(p, &x);
            /* the first three digits in thousandths (missing ones 0) */
            uint64_t three = k >= 3 ? x : x & ((1ULL << (8 * k)) - 1);
            frac_value = (three & 0xFF) * 100 + ((three >> 8) & 0xFF) * 10 + ((three >> 16) & 0xFF);
            frac_digits = k;
            p += k;
            while (k == 8 && end - p >= 8) {
                k = digit_run8(p, &x);
                frac_digits += k;
                p += k;
            }
            if (k == 8)
                while (p < end && (unsigned)(*p - '0') <= 9) { frac_digits++; p++; }
        } else {
            while (p < end && (unsigned)(*p - '0') <= 9) {
                if (frac_digits < 3) frac_value = frac_value * 10 + (uint64_t)(*p - '0');
                frac_digits++;
                p++;
            }
            for (int i = frac_digits; i < 3; i++) frac_value *= 10;
        }
        if (p == digits) { if (p >= end) MORE(c); FAIL(c, "bad number"); }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        has_exp = 1;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const char *digits = p;
        while (p < end && (unsigned)(*p - '0') <= 9) p++;
        if (p == digits) { if (p >= end) MORE(c); FAIL(c, "bad number"); }
    }
    if (p >= end) MORE(c); /* a number may continue in the next chunk */
    n->text = c->p;
    n->len = (size_t)(p - c->p);
    n->negative = negative;
    n->has_frac = has_frac;
    n->has_exp = has_exp;
    n->int_digits = int_digits;
    n->frac_digits = frac_digits;
    n->int_value = int_value;
    n->frac_value = frac_value;
    c->p = p;
    return 0;
}

/* A JSON number at c->p checked against the grammar as number() does, its value not read:
 * most numbers are in values skipped or kept as text (the recorded shapes' lists), where
 * filling a Number cost half of the scan's number parsing. */
static int skip_number(Cur *c) {
    const char *p = c->p, *end = c->end;
    if (p < end && *p == '-') p++;
    if (p >= end) MORE(c);
    if (*p == '0') {
        p++;
    } else if ((unsigned)(*p - '1') <= 8) {
        p = skip_digits(p + 1, end);
    } else {
        FAIL(c, "bad number");
    }
    if (p < end && *p == '.') {
        const char *digits = ++p;
        p = skip_digits(p, end);
        if (p == digits) { if (p >= end) MORE(c); FAIL(c, "bad number"); }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const char *digits = p;
        while (p < end && (unsigned)(*p - '0') <= 9) p++;
        if (p == digits) { if (p >= end) MORE(c); FAIL(c, "bad number"); }
    }
    if (p >= end) MORE(c); /* a number may continue in the next chunk */
    c->p = p;
    return 0;
}

static int literal(Cur *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n) {
        if (memcmp(c->p, word, (size_t)(c->end - c->p)) == 0) MORE(c);
        FAIL(c, "bad literal");
    }
    if (memcmp(c->p, word, n) != 0) FAIL(c, "bad literal");
    c->p += n;
    return 0;
}

static int skip_value(Cur *c, int depth);

/* An object key and its colon, at c->p: `"key" :` and the white space after. */
static int key(Cur *c, const char **k, size_t *kn, int *plain) {
    int rc;
    if (*c->p != '"') FAIL(c, "expected a key");
    if ((rc = string(c, k, kn, plain))) return rc;
    ws(c);
    if (c->p >= c->end) MORE(c);
    if (*c->p != ':') FAIL(c, "expected a colon");
    c->p++;
    ws(c);
    if (c->p >= c->end) MORE(c);
    return 0;
}

/* Whether the bytes at p (at least SEP_ROOM of them) start with the learned separator. */
static inline int sep_match(const Sep *sep, const char *p) {
    if (!sep->len) return 0;
#if defined(HAVE_SSE2)
    __m128i lo = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p),
                                _mm_loadu_si128((const __m128i *)sep->bytes));
    __m128i hi = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + 16)),
                                _mm_loadu_si128((const __m128i *)(sep->bytes + 16)));
    uint32_t equal = (uint32_t)_mm_movemask_epi8(lo) | ((uint32_t)_mm_movemask_epi8(hi) << 16);
    uint32_t need = sep->len >= 32 ? 0xFFFFFFFFu : (1u << sep->len) - 1;
    return (equal & need) == need;
#else
    return memcmp(p, sep->bytes, sep->len) == 0;
#endif
}

/* Remember the separator just parsed, from..to (to: the value's first byte), as the latest
 * of its position; only where a match could be tried (SEP_ROOM bytes at from). */
static inline void sep_learn(SepSlot *at, const char *from, const char *to, const char *end,
                             int key, int slot) {
    size_t n = (size_t)(to - from);
    if (!at || n > SEP_MAX || end - from < SEP_ROOM) return;
    at->way[1] = at->way[0];
    Sep *sep = &at->way[0];
    memcpy(sep->bytes, from, SEP_MAX); /* the bytes past n are never compared */
    sep->len = (uint8_t)n;
    sep->key = (int8_t)key;
    sep->slot = (int8_t)slot;
}

/* The separator before the next member of an object, at c->p (the end of the member before,
 * or the byte after the opening brace when ``first``): one learned at this position (``at``,
 * NULL past SEP_SLOTS), or white space, the comma, and the key and colon parsed. Returns 0
 * with c->p on the member's value and *hit the learned separator that matched (NULL when the
 * key was parsed, into *k / *kn), 1 at the closing brace (c->p past it), -1 / -2 as the
 * parser does. */
static inline int member(Cur *c, const SepSlot *at, int first, const Sep **hit, const char **k,
                         size_t *kn) {
    int rc, plain;
    *hit = NULL;
    if (at && c->end - c->p >= SEP_ROOM) {
        if (sep_match(&at->way[0], c->p)) *hit = &at->way[0];
        else if (sep_match(&at->way[1], c->p)) *hit = &at->way[1];
    }
    if (*hit) {
        c->p += (*hit)->len;
        ws(c); /* a value after more white space than the learned separator had */
        if (c->p >= c->end) MORE(c);
        return 0;
    }
    ws(c);
    if (c->p >= c->end) MORE(c);
    if (*c->p == '}') { c->p++; return 1; }
    if (!first) {
        if (*c->p != ',') FAIL(c, "expected a comma");
        c->p++;
        ws(c);
        if (c->p >= c->end) MORE(c);
    }
    if ((rc = key(c, k, kn, &plain))) return rc;
    if (!plain) FAIL(c, "escaped key");
    return 0;
}

/* An object at c->p (on its '{'), itself at ``depth``: its values at one more. */
static int skip_object(Cur *c, int depth) {
    int rc;
    c->p++;
    ws(c);
    if (c->p >= c->end) MORE(c);
    if (*c->p == '}') { c->p++; return 0; }
    for (;;) {
        const char *k; size_t kn; int plain;
        if ((rc = key(c, &k, &kn, &plain))) return rc;
        if ((rc = skip_value(c, depth + 1))) return rc;
        ws(c);
        if (c->p >= c->end) MORE(c);
        if (*c->p == ',') {
            c->p++;
            ws(c);
            if (c->p >= c->end) MORE(c);
            continue;
        }
        if (*c->p == '}') { c->p++; return 0; }
        FAIL(c, "expected a comma");
    }
}

/* An array at c->p (on its '['), itself at ``depth``: each element checked at one more depth
 * than its array, as skip_value checks it, but nested arrays opened in this loop rather than
 * by a call per element. The recorded shapes are lists of lists of numbers and strings: on
 * the bench trace's ops this loop runs 7% fewer instructions than the recursion. */
static int skip_array(Cur *c, int depth) {
    int rc, open = 1; /* the arrays open: an element is at depth + open */
    c->p++;
    ws(c);
    if (c->p >= c->end) MORE(c);
    if (*c->p == ']') { c->p++; return 0; }
    for (;;) {
        /* on an element's first byte */
        if (depth + open > 500) FAIL(c, "nested too deeply");
        char ch = *c->p;
        if (ch == '[') {
            c->p++;
            open++;
            ws(c);
            if (c->p >= c->end) MORE(c);
            if (*c->p != ']') continue; /* on to its first element */
            c->p++;                     /* an empty array: one element done */
            open--;
        } else if (ch == '"') {
            const char *s; size_t n; int plain;
            if ((rc = string(c, &s, &n, &plain))) return rc;
        } else if (ch == '{') {
            if ((rc = skip_object(c, depth + open))) return rc;
        } else if (ch == 't') {
            if ((rc = literal(c, "true", 4))) return rc;
        } else if (ch == 'f') {
            if ((rc = literal(c, "false", 5))) return rc;
        } else if (ch == 'n') {
            if ((rc = literal(c, "null", 4))) return rc;
        } else if ((rc = skip_number(c))) {
            return rc;
        }
        /* after an element: the arrays it closes, then a comma before the next */
        for (;;) {
            ws(c);
            if (c->p >= c->end) MORE(c);
            if (*c->p != ']') break;
            c->p++;
            if (--open == 0) return 0;
        }
        if (*c->p != ',') FAIL(c, "expected a comma");
        c->p++;
        ws(c);
        if (c->p >= c->end) MORE(c);
    }
}

static int skip_value(Cur *c, int depth) {
    const char *s; size_t n; int plain;
    if (depth > 500) FAIL(c, "nested too deeply");
    if (c->p >= c->end) MORE(c);
    switch (*c->p) {
    case '"': return string(c, &s, &n, &plain);
    case '{': return skip_object(c, depth);
    case '[': return skip_array(c, depth);
    case 't': return literal(c, "true", 4);
    case 'f': return literal(c, "false", 5);
    case 'n': return literal(c, "null", 4);
    default: return skip_number(c);
    }
}

/* ---- values with types ------------------------------------------------------------------ */

static const double EXACT_LIMIT_US = 8796093022208.0; /* 2**43: float64 keeps every ns below */

/* Microseconds -> nanoseconds: exact for plain decimals of up to 3 places, else as the msgspec
 * path computes it from the float (floor, then the fraction rounded half to even). */
static int number_to_ns(Cur *c, const char *text, size_t len, Number *n, int64_t *out,
                        int *simple) {
    /* INT64_MAX / 1000 bounds the whole microseconds (epoch ones have 16 digits) */
    *simple = !n->has_exp && n->frac_digits <= 3 &&
              (n->int_digits <= 15 || (n->int_digits == 16 && n->int_value <= 9223372036854774ULL));
    if (*simple) {
        int64_t v = (int64_t)(n->int_value * 1000 + n->frac_value);
        *out = n->negative ? -v : v;
        return 0;
    }
    char tmp[64];
    if (len >= sizeof tmp) FAIL(c, "long number");
    memcpy(tmp, text, len);
    tmp[len] = 0;
    double d = strtod(tmp, NULL);
    if (!(fabs(d) < EXACT_LIMIT_US)) {
        FAIL(c, "large timestamp that is not a plain decimal");
    }
    double whole = floor(d);
    *out = (int64_t)whole * 1000 + (int64_t)nearbyint((d - whole) * 1000.0);
    return 0;
}

/* ts / dur: a number, or a string holding one (Ascend). */
static int time_value(Cur *c, int64_t *out) {
    int rc, simple;
    Number n;
    if (c->p >= c->end) MORE(c);
    if (*c->p == '"') {
        const char *s; size_t len; int plain;
        if ((rc = string(c, &s, &len, &plain))) return rc;
        if (!plain || len == 0) FAIL(c, "odd timestamp text");
        Cur inner = {s, s + len, c->s};
        /* the number must fill the string exactly; a sentinel-free parse needs one more byte */
        char tmp[72];
        if (len >= sizeof tmp - 1) FAIL(c, "long timestamp text");
        memcpy(tmp, s, len);
        tmp[len] = ' ';
        inner.p = tmp;
        inner.end = tmp + len + 1;
        if (number(&inner, &n) || inner.p != tmp + len) FAIL(c, "timestamp text is not a number");
        return number_to_ns(c, tmp, len, &n, out, &simple);
    }
    if ((rc = number(c, &n))) return rc;
    return number_to_ns(c, n.text, n.len, &n, out, &simple);
}

/* int | float | str | None, as msgspec decodes a Scalar (no bools, objects or arrays). */
static int scalar(Cur *c, int64_t *value, uint8_t *tag) {
    int rc;
    if (c->p >= c->end) MORE(c);
    char ch = *c->p;
    if (ch == 'n') {
        if ((rc = literal(c, "null", 4))) return rc;
        *tag = TAG_NULL;
        *value = 0;
        return 0;
    }
    if (ch == '"') {
        const char *s; size_t len; int plain, fresh;
        if ((rc = string(c, &s, &len, &plain))) return rc;
        int64_t id = intern_add(&c->s->names, s, len, &fresh);
        if (id < 0) FAIL(c, "out of memory");
        *tag = TAG_STR;
        *value = id;
        return 0;
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        Number n;
        if ((rc = number(c, &n))) return rc;
        if (!n.has_frac && !n.has_exp) {
            if (n.int_digits > 18) FAIL(c, "integer beyond 64 bits");
            *value = n.negative ? -(int64_t)n.int_value : (int64_t)n.int_value;
            *tag = TAG_INT;
            return 0;
        }
        char tmp[64];
        if (n.len >= sizeof tmp) FAIL(c, "long number");
        memcpy(tmp, n.text, n.len);
        tmp[n.len] = 0;
        double d = strtod(tmp, NULL);
        if (!isfinite(d)) FAIL(c, "number out of range");
        memcpy(value, &d, sizeof d);
        *tag = TAG_FLOAT;
        return 0;
    }
    FAIL(c, "not a scalar");
}

/* pid / tid: int | str. */
static int int_or_str(Cur *c, int64_t *value, uint8_t *tag) {
    int rc;
    if (c->p >= c->end) MORE(c);
    if (*c->p == 'n') FAIL(c, "null id");
    if ((rc = scalar(c, value, tag))) return rc;
    if (*tag == TAG_FLOAT) FAIL(c, "float id");
    return 0;
}

/* grid / block: [x, y, z] of int | None (up to three), or a text such as "grid(100,)". */
static int dim3(Cur *c, Event *e, int first) {
    int rc;
    if (c->p >= c->end) MORE(c);
    for (int i = 0; i < 3; i++) { e->tag[first + i] = TAG_NULL; e->value[first + i] = 0; }
    if (*c->p == '"') {
        const char *s; size_t len; int plain;
        return string(c, &s, &len, &plain);
    }
    if (*c->p != '[') FAIL(c, "odd launch dimension");
    c->p++;
    ws(c);
    if (c->p >= c->end) MORE(c);
    if (*c->p == ']') { c->p++; return 0; }
    for (int i = 0;; i++) {
        if (i >= 3) FAIL(c, "launch dimension of more than 3");
        int64_t v; uint8_t t;
        if ((rc = scalar(c, &v, &t))) return rc;
        if (t != TAG_INT && t != TAG_NULL) FAIL(c, "odd launch dimension");
        e->value[first + i] = v;
        e->tag[first + i] = t;
        ws(c);
        if (c->p >= c->end) MORE(c);
        if (*c->p == ']') { c->p++; return 0; }
        if (*c->p != ',') FAIL(c, "expected a comma");
        c->p++;
        ws(c);
    }
}

static int raw_arg(Cur *c, Event *e, int r) {
    const char *start = c->p;
    int rc, fresh;
    if ((rc = skip_value(c, 2))) return rc;
    int64_t id = intern_add(&c->s->raws, start, (size_t)(c->p - start), &fresh);
    if (id < 0) FAIL(c, "out of memory");
    e->raw[r] = (int32_t)id;
    return 0;
}

/* The value of an args key that the table gives ``reader`` and column ``slot``. */
static int read_arg(Cur *c, Event *e, int reader, int slot) {
    switch (reader) {
    case A_SCALAR: e->touched |= 1ULL << slot; return scalar(c, &e->value[slot], &e->tag[slot]);
    case A_DIM3: e->touched |= 7ULL << slot; return dim3(c, e, slot);
    case A_RAW: return raw_arg(c, e, slot);
    case A_DECLINE: FAIL(c, DECLINE_REASONS[slot]);
    default: return skip_value(c, 2);
    }
}

/* Every args column back to null: only those set since the last reset (a few per event; a
 * sweep of all of them took a twentieth of the scan). */
static void reset_args(Event *e) {
    uint64_t touched = e->touched;
    while (touched) {
        int i = ctz64(touched);
        touched &= touched - 1;
        e->tag[i] = TAG_NULL;
        e->value[i] = 0;
    }
    e->touched = 0;
    for (int i = 0; i < N_RAW; i++) e->raw[i] = -1;
}

/* A raw (A_RAW) or skipped (A_SKIP) args value at c->p that starts with '[', '{' or '"': such
 * a value ends where its closing bracket or quote is, whatever follows, so bytes equal to a
 * value the parser accepted before parse as that value. An op's recorded shapes repeat from
 * call to call of one operator (the last two values of an (op name, args position) hold
 * three in four of the bench trace's): compared as bytes with those, they skip validating
 * (each number and string of them) and hashing, which were a seventh of the scan. Otherwise
 * parsed and kept as before (and remembered). */
static int memo_value(Cur *c, Event *e, int reader, int slot, int position) {
    Scanner *s = c->s;
    int raw = reader == A_RAW;
    Intern *table = raw ? &s->raws : &s->skipped;
    if (position >= SEP_SLOTS) position = SEP_SLOTS - 1;
    /* the key's lowest bit is the table, whatever the name id (it wraps harmlessly) */
    uint32_t key = (e->name * SEP_SLOTS + (uint32_t)position) << 1 | (uint32_t)raw;
    Memo *m = &s->memo[(key * 2654435761u) >> (32 - MEMO_BITS)];
    if (m->filled && m->key == key) {
        for (int way = 0; way < 2; way++) {
            size_t n;
            uint32_t id = m->id[way];
            const char *value = intern_str(table, id, &n);
            if ((size_t)(c->end - c->p) < n || memcmp(c->p, value, n) != 0) continue;
            c->p += n;
            if (raw) e->raw[slot] = (int32_t)id;
            m->id[way] = m->id[0];
            m->id[0] = id;
            return 0;
        }
    }
    const char *start = c->p;
    int rc, fresh;
    if ((rc = skip_value(c, 2))) return rc;
    if (!raw && table->arena.len >= SKIPPED_LIMIT) return 0;
    int64_t id = intern_add(table, start, (size_t)(c->p - start), &fresh);
    if (id < 0) FAIL(c, "out of memory");
    if (raw) e->raw[slot] = (int32_t)id;
    if (!m->filled || m->key != key) {
        m->key = key;
        m->filled = 1;
        m->id[1] = (uint32_t)id;
    } else {
        m->id[1] = m->id[0];
    }
    m->id[0] = (uint32_t)id;
    return 0;
}

/* Parse an args object for an event of ``kind`` (K_GPU/K_CALL/K_META: Kineto's typed args;
 * K_OP: the recorded shapes; K_OTHER: only a look for NPU tasks). */
static int args_object(Cur *c, Event *e, int kind) {
    int rc;
    reset_args(e);
    if (c->p >= c->end) MORE(c);
    if (*c->p != '{') FAIL(c, "args is not an object");
    c->p++;
    SepSlot *seps = c->s->args_seps[kind];
    for (int i = 0;; i++) {
        SepSlot *at = i < SEP_SLOTS ? &seps[i] : NULL;
        const Sep *hit;
        const char *from = c->p, *k = NULL;
        size_t kn = 0;
        int reader, slot;
        if ((rc = member(c, at, i == 0, &hit, &k, &kn))) return rc > 0 ? 0 : rc;
        if (hit) {
            reader = hit->key;
            slot = hit->slot;
        } else {
            reader = arg_key(kind, k, kn, &slot);
            sep_learn(at, from, c->p, c->end, reader, slot);
        }
        if ((reader == A_RAW || reader == A_SKIP) && c->p < c->end &&
            (*c->p == '[' || *c->p == '{' || *c->p == '"')) {
            if ((rc = memo_value(c, e, reader, slot, i))) return rc;
            continue;
        }
        if ((rc = read_arg(c, e, reader, slot))) return rc;
    }
}

/* ---- categories and parts --------------------------------------------------------------- */

/* The kind the caller's table gives a category (K_OTHER when it has none); -1 when out of
 * memory. A category not in the table is added to it past nknown, so it is hashed once. */
static int32_t known_kind(Scanner *s, const char *k, size_t n) {
    int fresh;
    int64_t id = intern_add(&s->known, k, n, &fresh);
    if (id < 0) return -1;
    return (size_t)id < s->nknown ? ((int32_t *)s->known_kinds.data)[id] : K_OTHER;
}

static int64_t cat_id(Scanner *s, const char *k, size_t n) {
    int fresh;
    int64_t id = intern_add(&s->cats, k, n, &fresh);
    if (id < 0 || !fresh) return id;
    int32_t kind = known_kind(s, k, n);
    int64_t zero = 0;
    if (kind == -1 || buf_put(&s->cat_kinds, &kind, sizeof kind) ||
        buf_put(&s->counts, &zero, sizeof zero))
        return -1;
    return id;
}

static Part *part_for(Scanner *s, uint32_t cat, int kind) {
    size_t slot = (size_t)cat * N_KINDS + (size_t)kind;
    size_t have = s->part_of.len / sizeof(int32_t);
    while (have <= slot) {
        int32_t none = -1;
        if (buf_put(&s->part_of, &none, sizeof none)) return NULL;
        have++;
    }
    int32_t *index = (int32_t *)s->part_of.data;
    if (index[slot] >= 0) return &s->parts[index[slot]];
    Part *parts = realloc(s->parts, (s->nparts + 1) * sizeof(Part));
    if (!parts) return NULL;
    s->parts = parts;
    Part *p = &s->parts[s->nparts];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->cat = cat;
    p->wanted = (1ULL << C_PID) | (1ULL << C_TID);
    for (const int *col = KIND_COLS[kind]; *col >= 0; col++) p->wanted |= 1ULL << *col;
    p->dense = p->wanted & ((1ULL << C_FIRST_ARG) - 1); /* pid, tid, id: every event has them */
    index = (int32_t *)s->part_of.data;
    index[slot] = (int32_t)s->nparts++;
    return p;
}

static int reserve_tagged(Part *p, int col, size_t rows) {
    return buf_reserve(&p->value[col], rows * 8 - p->value[col].len) ||
           buf_reserve(&p->tag[col], rows - p->tag[col].len);
}

/* Room for at least one more row in every column of the part: all columns grown together,
 * so that storing a row checks one count (a capacity check per column per row was a twentieth
 * of the scan). */
static int part_reserve(Part *p, int kind) {
    if (p->rows < p->cap_rows) return 0;
    size_t rows = p->cap_rows ? 2 * p->cap_rows : 256;
    if (buf_reserve(&p->name, rows * 4 - p->name.len) || buf_reserve(&p->ts, rows * 8 - p->ts.len))
        return -1;
    if (KIND_DUR[kind] && buf_reserve(&p->dur, rows * 8 - p->dur.len)) return -1;
    if (KIND_PHASE[kind] && buf_reserve(&p->phase, rows * 4 - p->phase.len)) return -1;
    for (uint64_t cols = p->dense; cols; cols &= cols - 1)
        if (reserve_tagged(p, ctz64(cols), rows)) return -1;
    if (KIND_RAW[kind])
        for (int i = 0; i < N_RAW; i++)
            if (buf_reserve(&p->raw[i], rows * 4 - p->raw[i].len)) return -1;
    p->cap_rows = rows;
    return 0;
}

/* Buffers for args column i of p at its first value: null (tag and value 0) in every row
 * before. Most args columns of a kind are null on most of its events (a collective's args on
 * every op of a trace without collectives: 9 bytes a row written, and faulted in, for
 * nothing), and one never set has no buffers at all. */
static int materialize(Part *p, int i) {
    if (reserve_tagged(p, i, p->cap_rows)) return -1;
    memset(p->value[i].data, 0, p->rows * 8);
    memset(p->tag[i].data, TAG_NULL, p->rows);
    p->value[i].len = p->rows * 8;
    p->tag[i].len = p->rows;
    p->dense |= 1ULL << i;
    return 0;
}

/* Row ``row`` of a column of ``width``-byte values, in the room part_reserve made. The
 * buffers' lengths are not kept row by row (a load and a store per column per row):
 * part_lengths sets them from the rows when the part is handed over. */
static inline void put(Buf *b, size_t row, const void *src, size_t width) {
    memcpy(b->data + row * width, src, width);
}

static inline void put_tagged(Part *p, Event *e, int col) {
    put(&p->value[col], p->rows, &e->value[col], 8);
    put(&p->tag[col], p->rows, &e->tag[col], 1);
}

/* Every buffer's length from the part's rows (see put). */
static void part_lengths(Part *p) {
    size_t rows = p->rows;
    int kind = p->kind;
    p->name.len = rows * 4;
    p->ts.len = rows * 8;
    if (KIND_DUR[kind]) p->dur.len = rows * 8;
    if (KIND_PHASE[kind]) p->phase.len = rows * 4;
    for (uint64_t cols = p->dense; cols; cols &= cols - 1) {
        int i = ctz64(cols);
        p->value[i].len = rows * 8;
        p->tag[i].len = rows;
    }
    if (KIND_RAW[kind])
        for (int i = 0; i < N_RAW; i++) p->raw[i].len = rows * 4;
}

static int store(Scanner *s, Event *e, int kind) {
    Part *p = part_for(s, e->cat, kind);
    if (!p || part_reserve(p, kind)) return -1;
    /* args columns set in this event that have no buffers yet: made, if the value is not null */
    for (uint64_t fresh = e->touched & p->wanted & ~p->dense; fresh; fresh &= fresh - 1) {
        int i = ctz64(fresh);
        if (e->tag[i] != TAG_NULL && materialize(p, i)) return -1;
    }
    size_t row = p->rows;
    put(&p->name, row, &e->name, 4);
    put(&p->ts, row, &e->ts, 8);
    if (KIND_DUR[kind]) put(&p->dur, row, &e->dur, 8);
    if (KIND_PHASE[kind]) put(&p->phase, row, &e->phase, 4);
    for (uint64_t cols = p->dense; cols; cols &= cols - 1) put_tagged(p, e, ctz64(cols));
    if (KIND_RAW[kind])
        for (int i = 0; i < N_RAW; i++) put(&p->raw[i], row, &e->raw[i], 4);
    p->rows = row + 1;
    return 0;
}

/* ---- one event ---------------------------------------------------------------------------- */

/* Which frame an event of this category kind and phase goes to (K_SKIP: none). */
static int destination(Scanner *s, int cat_kind, int has_cat, Event *e) {
    size_t n;
    const char *ph = intern_str(&s->names, e->phase, &n);
    char p = n == 1 ? ph[0] : 0;
    if (p == 'B' || p == 'E') return -1; /* begin/end pairs: the msgspec path pairs them */
    int kind = cat_kind & KIND_MASK;
    if (kind == K_GPU || kind == K_OP || kind == K_CALL || kind == K_PYTHON)
        return p == 'X' ? kind : K_SKIP;
    if ((p == 'i' || p == 'I') && e->name == s->memory_name) return K_MEMORY;
    if (kind == K_SKIP) return K_SKIP;
    if (p == 's' || p == 'f' || p == 't') return K_FLOW;
    if (p == 'i' || p == 'I') return K_INSTANT;
    if (!has_cat && p == 'M') return K_META;
    if (p == 'X') return K_OTHER; /* only looked at for NPU tasks */
    return K_SKIP;
}

/* Which event key k[0:kn] is (EK_OTHER: one the scanner skips). */
static inline int event_key(const char *k, size_t kn) {
    switch (kn) {
    case 2:
        if (KEY_IS(k, kn, "ph")) return EK_PH;
        if (KEY_IS(k, kn, "ts")) return EK_TS;
        if (KEY_IS(k, kn, "id")) return EK_ID;
        break;
    case 3:
        if (KEY_IS(k, kn, "cat")) return EK_CAT;
        if (KEY_IS(k, kn, "pid")) return EK_PID;
        if (KEY_IS(k, kn, "tid")) return EK_TID;
        if (KEY_IS(k, kn, "dur")) return EK_DUR;
        break;
    case 4:
        if (KEY_IS(k, kn, "name")) return EK_NAME;
        if (KEY_IS(k, kn, "args")) return EK_ARGS;
        break;
    }
    return EK_OTHER;
}

static int event(Cur *c) {
    Scanner *s = c->s;
    /* the scanner's one event, kept from the last: only what that one set is reset */
    Event *e = &s->event;
    int rc;
    e->value[C_PID] = e->value[C_TID] = e->value[C_ID] = 0;
    e->tag[C_PID] = e->tag[C_TID] = TAG_INT;
    e->tag[C_ID] = TAG_NULL;
    reset_args(e);
    e->ts = e->dur = 0;
    e->name = e->phase = e->cat = 0; /* names[0] is "" */
    e->has_cat = 0;
    e->args = NULL;
    e->args_len = 0;
    unsigned seen = 0;
    int args_parsed_as = -1;

    if (c->p >= c->end) MORE(c);
    if (*c->p != '{') FAIL(c, "event is not an object");
    c->p++;
    for (int i = 0;; i++) {
        SepSlot *at = i < SEP_SLOTS ? &s->event_seps[i] : NULL;
        const Sep *hit;
        const char *from = c->p, *k = NULL;
        size_t kn = 0;
        int ek;
        if ((rc = member(c, at, i == 0, &hit, &k, &kn))) {
            if (rc > 0) break;
            return rc;
        }
        if (hit) {
            ek = hit->key;
        } else {
            ek = event_key(k, kn);
            sep_learn(at, from, c->p, c->end, ek, 0);
        }
        unsigned bit = ek == EK_OTHER ? 0 : 1u << (ek - 1);
        switch (ek) {
        case EK_PH: {
            const char *v; size_t vn; int vplain, fresh;
            if (*c->p != '"') FAIL(c, "ph is not text");
            if ((rc = string(c, &v, &vn, &vplain))) return rc;
            if (!vplain) FAIL(c, "escaped ph");
            int64_t id;
            unsigned char one = vn == 1 ? (unsigned char)v[0] : 0x80;
            if (one < 0x80 && s->phase_ids[one]) {
                id = (int64_t)s->phase_ids[one] - 1;
            } else {
                id = intern_add(&s->names, v, vn, &fresh);
                if (id < 0) FAIL(c, "out of memory");
                if (one < 0x80) s->phase_ids[one] = (uint32_t)id + 1;
            }
            e->phase = (uint32_t)id;
            break;
        }
        case EK_CAT: {
            const char *v; size_t vn; int vplain;
            if (*c->p != '"') FAIL(c, "cat is not text");
            if ((rc = string(c, &v, &vn, &vplain))) return rc;
            if (!vplain) FAIL(c, "escaped cat");
            int64_t id;
            if (s->last_cat_id >= 0 && vn == s->last_cat_len && memcmp(v, s->last_cat, vn) == 0) {
                id = s->last_cat_id;
            } else {
                id = cat_id(s, v, vn);
                if (id < 0) FAIL(c, "out of memory");
                if (vn <= sizeof s->last_cat) {
                    memcpy(s->last_cat, v, vn);
                    s->last_cat_len = vn;
                    s->last_cat_id = id;
                }
            }
            e->cat = (uint32_t)id;
            e->has_cat = vn > 0;
            break;
        }
        case EK_NAME: {
            const char *v; size_t vn; int vplain, fresh;
            if (*c->p != '"') FAIL(c, "name is not text");
            if ((rc = string(c, &v, &vn, &vplain))) return rc;
            int64_t id = intern_add(&s->names, v, vn, &fresh);
            if (id < 0) FAIL(c, "out of memory");
            e->name = (uint32_t)id;
            break;
        }
        case EK_PID:
            if ((rc = int_or_str(c, &e->value[C_PID], &e->tag[C_PID]))) return rc;
            break;
        case EK_TID:
            if ((rc = int_or_str(c, &e->value[C_TID], &e->tag[C_TID]))) return rc;
            break;
        case EK_TS:
            if ((rc = time_value(c, &e->ts))) return rc;
            break;
        case EK_DUR:
            if ((rc = time_value(c, &e->dur))) return rc;
            break;
        case EK_ID:
            if ((rc = scalar(c, &e->value[C_ID], &e->tag[C_ID]))) return rc;
            break;
        case EK_ARGS:
            e->args = c->p;
            if (seen & 2) {
                /* the category is known: read the args it needs on the way */
                int32_t kind = ((int32_t *)s->cat_kinds.data)[e->cat];
                int dest = destination(s, kind, e->has_cat, e);
                int want = dest < 0 ? -1 : KIND_ARGS_AS[dest];
                if (want >= 0) {
                    if ((rc = args_object(c, e, want))) return rc;
                    args_parsed_as = want;
                } else if ((rc = skip_value(c, 1))) {
                    return rc;
                }
                /* the phase may still change below; then the args are read again */
            } else if ((rc = skip_value(c, 1))) {
                return rc;
            }
            e->args_len = (size_t)(c->p - e->args);
            break;
        default:
            if ((rc = skip_value(c, 1))) return rc;
        }
        if (bit & seen) FAIL(c, "a key twice in one event");
        seen |= bit;
    }
    if (!(seen & 2)) {
        int64_t id = cat_id(s, "", 0);
        if (id < 0) FAIL(c, "out of memory");
        e->cat = (uint32_t)id;
    }
    int32_t cat_kind = ((int32_t *)s->cat_kinds.data)[e->cat];
    ((int64_t *)s->counts.data)[e->cat]++;
    s->events++;
    int dest = destination(s, cat_kind, e->has_cat, e);
    if (dest < 0) FAIL(c, "begin/end events");
    if (dest == K_SKIP) return 0;
    int want = KIND_ARGS_AS[dest];
    if (e->args && args_parsed_as != want && want >= 0) {
        Cur again = {e->args, e->args + e->args_len, s};
        if ((rc = args_object(&again, e, want))) return rc == -2 ? -1 : rc;
    }
    if (dest == K_OTHER) {
        /* No category, no NPU task (the look above declines those), a time and a duration:
         * the pre-Kineto autograd profiler export writes its operators so. */
        if (e->has_cat || (seen & (32 | 64)) != (32 | 64)) return 0;
        dest = K_OP;
        if (e->args) {
            Cur again = {e->args, e->args + e->args_len, s};
            if ((rc = args_object(&again, e, K_OP))) return rc == -2 ? -1 : rc;
        }
    }
    if ((cat_kind & KIND_LEGACY) && dest != K_META) {
        e->value[C_EXT] = e->value[C_EXT_LEGACY];
        e->tag[C_EXT] = e->tag[C_EXT_LEGACY];
        e->touched |= 1ULL << C_EXT;
    }
    if (store(s, e, dest)) FAIL(c, "out of memory");
    return 0;
}

/* ---- the document ------------------------------------------------------------------------- */

static int header_pair(Cur *c, const char *key_start) {
    /* c->p is on the value; copy `"key": value` as written */
    Scanner *s = c->s;
    int rc;
    if ((rc = skip_value(c, 1))) return rc;
    if (s->header.len && buf_put(&s->header, ",", 1)) FAIL(c, "out of memory");
    if (buf_put(&s->header, key_start, (size_t)(c->p - key_start))) FAIL(c, "out of memory");
    return 0;
}

/* Parse as many complete items as the buffer holds; returns the bytes consumed or -1. */
static Py_ssize_t scan(Scanner *s, const char *data, Py_ssize_t size, int final) {
    Cur c = {data, data + size, s};
    const char *done = data;
    int rc = 0;
    for (;;) {
        ws(&c);
        done = c.p;
        if (c.p >= c.end) break;
        char ch = *c.p;
        switch (s->state) {
        case S_START:
            if (ch == '{') { c.p++; s->state = S_TOP_KEY; }
            else if (ch == '[') { c.p++; s->bare = 1; s->seen_events = 1; s->state = S_EVENTS_FIRST; }
            else { s->fail = "not an object or array"; return -1; }
            continue;
        case S_TOP_KEY:
        case S_TOP_NEXT:
        case S_TOP_AFTER_EVENTS:
            if (ch == '}') { c.p++; s->state = S_DONE; continue; }
            if (s->state != S_TOP_KEY) {
                if (ch != ',') { s->fail = "expected a comma"; return -1; }
                c.p++;
                ws(&c);
                if (c.p >= c.end) { rc = -2; break; }
            }
            {
                const char *key_start = c.p, *k;
                size_t kn;
                int plain;
                if (*c.p != '"') { s->fail = "expected a key"; return -1; }
                if ((rc = string(&c, &k, &kn, &plain))) break;
                ws(&c);
                if (c.p >= c.end) { rc = -2; break; }
                if (*c.p != ':') { s->fail = "expected a colon"; return -1; }
                c.p++;
                ws(&c);
                if (c.p >= c.end) { rc = -2; break; }
                if (plain && KEY_IS(k, kn, "traceEvents")) {
                    if (s->seen_events) { s->fail = "traceEvents twice"; return -1; }
                    if (*c.p != '[') { s->fail = "traceEvents is not a list"; return -1; }
                    c.p++;
                    s->seen_events = 1;
                    s->state = S_EVENTS_FIRST;
                    continue;
                }
                if ((rc = header_pair(&c, key_start))) break;
                s->state = S_TOP_NEXT;
            }
            continue;
        case S_EVENTS_FIRST:
        case S_EVENTS_NEXT:
            if (ch == ']') {
                c.p++;
                s->state = s->bare ? S_DONE : S_TOP_AFTER_EVENTS;
                continue;
            }
            if (s->state == S_EVENTS_NEXT) {
                if (ch != ',') { s->fail = "expected a comma"; return -1; }
                c.p++;
                ws(&c);
                if (c.p >= c.end) { rc = -2; break; }
            }
            if ((rc = event(&c))) break;
            s->state = S_EVENTS_NEXT;
            continue;
        case S_DONE:
            s->fail = "trailing characters";
            return -1;
        }
        break;
    }
    if (rc == -1) { s->fail_at = (size_t)(c.p - data); return -1; }
    if (final && (rc == -2 || s->state != S_DONE)) {
        /* a number at the very end: the document ends with it (never valid for a trace) */
        s->fail = "the document ends early";
        return -1;
    }
    return rc == -2 ? (Py_ssize_t)(done - data) : (Py_ssize_t)(c.p - data);
}

/* ---- Python glue ---------------------------------------------------------------------- */

/* One category the caller knows, with its kind (KIND_LEGACY or'ed in); -1 when out of memory. */
static int known_add(Scanner *self, const char *text, size_t n, int32_t kind) {
    int fresh;
    if (intern_add(&self->known, text, n, &fresh) < 0 ||
        buf_put(&self->known_kinds, &kind, sizeof kind))
        return -1;
    self->nknown = self->known.count;
    return 0;
}

/* Copy the caller's dict (category text -> int kind) into known / known_kinds. */
static int known_categories(Scanner *self, PyObject *kinds) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kinds, &pos, &key, &value)) {
        if (!PyUnicode_Check(key) || !PyLong_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "kinds maps category text to an int kind");
            return -1;
        }
        Py_ssize_t n;
        const char *text = PyUnicode_AsUTF8AndSize(key, &n);
        if (!text) {
            PyErr_Clear(); /* not encodable (a lone surrogate): no valid document holds it */
            continue;
        }
        long kind = PyLong_AsLong(value);
        if (kind == -1 && PyErr_Occurred()) return -1;
        if (known_add(self, text, (size_t)n, (int32_t)kind)) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

/* The tables every scan starts from, the known categories aside (pure C: the fuzzing
 * harness, fuzz/scan_fuzzer.c, sets a scanner up without Python); -1 when out of memory. */
static int scanner_open(Scanner *self) {
    if (intern_init(&self->names) || intern_init(&self->raws) || intern_init(&self->cats) ||
        intern_init(&self->known) || intern_init(&self->skipped))
        return -1;
    return 0;
}

static int scanner_start(Scanner *self) {
    int fresh;
    if (intern_add(&self->names, "", 0, &fresh) != 0) return -1;
    int64_t memory = intern_add(&self->names, "[memory]", 8, &fresh);
    if (memory < 0) return -1;
    self->memory_name = (uint32_t)memory;
    memset(self->phase_ids, 0, sizeof self->phase_ids);
    self->last_cat_len = 0;
    self->last_cat_id = -1;
    self->state = S_START;
    return 0;
}

static int Scanner_init(Scanner *self, PyObject *args, PyObject *kw) {
    PyObject *kinds;
    if (!PyArg_ParseTuple(args, "O!", &PyDict_Type, &kinds)) return -1;
    if (self->known.slots) {
        /* its tables are built once: a second init would mix two category tables */
        PyErr_SetString(PyExc_RuntimeError, "a Scanner is initialised once; make a new one");
        return -1;
    }
    if (scanner_open(self)) {
        PyErr_NoMemory();
        return -1;
    }
    if (known_categories(self, kinds)) return -1;
    if (scanner_start(self)) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void part_free(Part *p) {
    buf_free(&p->name); buf_free(&p->phase); buf_free(&p->ts); buf_free(&p->dur);
    for (int i = 0; i < N_TAGGED; i++) { buf_free(&p->value[i]); buf_free(&p->tag[i]); }
    for (int i = 0; i < N_RAW; i++) buf_free(&p->raw[i]);
}

/* Everything a scanner holds (not the object itself). */
static void scanner_close(Scanner *self) {
    intern_free(&self->names);
    intern_free(&self->raws);
    intern_free(&self->cats);
    intern_free(&self->known);
    intern_free(&self->skipped);
    buf_free(&self->known_kinds);
    buf_free(&self->cat_kinds); buf_free(&self->counts); buf_free(&self->part_of);
    buf_free(&self->header);
    for (size_t i = 0; i < self->nparts; i++) part_free(&self->parts[i]);
    free(self->parts);
}

static void Scanner_dealloc(Scanner *self) {
    scanner_close(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Bytes below which feed() keeps the GIL: a chunk's opening "[" and closing "]" take
 * microseconds, and letting the GIL go for them cost the thread a wait to take it back while
 * another thread held it for Python work (up to the interpreter's 5 ms switch interval). */
#define FEED_WITH_GIL 4096

static PyObject *Scanner_feed(Scanner *self, PyObject *args) {
    Py_buffer view;
    int final = 0;
    if (self->taken) {
        PyErr_SetString(PyExc_RuntimeError, "the scanner's result was already taken");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*|p", &view, &final)) return NULL;
    Py_ssize_t done;
    if (view.len < FEED_WITH_GIL) {
        done = scan(self, view.buf, view.len, final);
    } else {
        Py_BEGIN_ALLOW_THREADS
        done = scan(self, view.buf, view.len, final);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    if (done < 0) {
        PyErr_Format(Unsupported, "%s (near byte %zu of the chunk)", self->fail, self->fail_at);
        return NULL;
    }
    return PyLong_FromSsize_t(done);
}

/* ---- Arrow export --------------------------------------------------------------------------
 *
 * result() hands each part's columns to Polars as one Arrow struct array (the Arrow C data
 * interface, imported by Polars without a copy): the columns' buffers as the scanner filled
 * them, a null mask made from the tags, texts as string views into the names or raws table.
 * Turning the buffers into Polars series in Python (a gather of names per text column, a mask
 * per nullable column) took ~2 ms of each chunk's time holding the GIL, which bounded a
 * parallel load on many cores. A column is exported when its values have the type its
 * X_* says (scan_tables.py's export type); the rare others (an id written as text, a label) stay
 * tagged buffers for the Python code, as before. */

#define ARROW_FLAG_NULLABLE 2

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

#if defined(_MSC_VER)
#define REF_ADD(p) InterlockedIncrement(p)
#define REF_SUB(p) InterlockedDecrement(p)
#else
#define REF_ADD(p) __atomic_add_fetch((p), 1, __ATOMIC_RELAXED)
#define REF_SUB(p) __atomic_sub_fetch((p), 1, __ATOMIC_ACQ_REL)
#endif

/* A table's text, shared by the string views of every column that uses it; freed with the
 * last of them (Polars may release an array on any thread, without the GIL). */
typedef struct {
    volatile long refs;
    char *data;
    int64_t len;
} Text;

static void text_unref(Text *t) {
    if (t && REF_SUB(&t->refs) == 0) {
        free(t->data);
        free(t);
    }
}

/* A table's strings as Arrow string views (16 bytes each: the length, then the string itself
 * up to 12 bytes, else its first 4 bytes, buffer 0 and its offset in text). */
typedef struct {
    Text *text;
    uint8_t *views; /* one per id */
    size_t count;
} Strings;

/* Append the UTF-8 of a validated JSON string's contents (escapes resolved). */
static int unescape_into(Buf *out, const char *s, size_t n) {
    size_t plain = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') continue;
        if (buf_put(out, s + plain, i - plain)) return -1;
        char e = s[++i];
        if (e == 'u') {
            uint32_t cp = (uint32_t)hex4(s + i + 1);
            i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo = (uint32_t)hex4(s + i + 3);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
            unsigned char u[4];
            size_t k;
            if (cp < 0x80) { u[0] = (unsigned char)cp; k = 1; }
            else if (cp < 0x800) { u[0] = 0xC0 | (cp >> 6); u[1] = 0x80 | (cp & 0x3F); k = 2; }
            else if (cp < 0x10000) { u[0] = 0xE0 | (cp >> 12); u[1] = 0x80 | ((cp >> 6) & 0x3F); u[2] = 0x80 | (cp & 0x3F); k = 3; }
            else { u[0] = 0xF0 | (cp >> 18); u[1] = 0x80 | ((cp >> 12) & 0x3F); u[2] = 0x80 | ((cp >> 6) & 0x3F); u[3] = 0x80 | (cp & 0x3F); k = 4; }
            if (buf_put(out, u, k)) return -1;
        } else {
            char r = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
            if (buf_put(out, &r, 1)) return -1;
        }
        plain = i + 1;
    }
    return buf_put(out, s + plain, n - plain);
}

/* The views of table t's strings (unescaped when ``as_text``; raw JSON is kept as written). */
static int strings_build(Strings *out, const Intern *t, int as_text) {
    Buf text = {0};
    memset(out, 0, sizeof *out);
    out->views = calloc(t->count ? t->count : 1, 16);
    out->text = calloc(1, sizeof(Text));
    if (!out->views || !out->text) return -1;
    out->text->refs = 1; /* the builder's own, dropped by strings_free */
    out->count = t->count;
    for (size_t id = 0; id < t->count; id++) {
        size_t n;
        const char *s = intern_str(t, (uint32_t)id, &n);
        size_t at = text.len;
        if ((as_text && memchr(s, '\\', n) ? unescape_into(&text, s, n) : buf_put(&text, s, n)))
            goto fail;
        size_t len = text.len - at;
        if (len > INT32_MAX || text.len > UINT32_MAX) goto fail; /* views hold 32-bit offsets */
        uint8_t *view = out->views + 16 * id;
        int32_t len32 = (int32_t)len, zero = 0, offset = (int32_t)at;
        memcpy(view, &len32, 4);
        if (len <= 12) {
            if (len) memcpy(view + 4, text.data + at, len); /* the rest stays 0 (calloc) */
        } else {
            memcpy(view + 4, text.data + at, 4);
            memcpy(view + 8, &zero, 4);
            memcpy(view + 12, &offset, 4);
        }
    }
    out->text->data = text.data;
    out->text->len = (int64_t)text.len;
    return 0;
fail:
    buf_free(&text);
    return -1;
}

static void strings_free(Strings *s) {
    free(s->views);
    text_unref(s->text);
    memset(s, 0, sizeof *s);
}

/* An exported array's memory: what its release frees. */
typedef struct {
    const void *buffers[4];
    void *owned[2];  /* the null mask and the values or views */
    Text *text;      /* a string column's text (a reference) */
    int64_t text_len; /* the views' one buffer length, as Arrow asks for view arrays */
} Owned;

static void release_array(struct ArrowArray *a) {
    for (int64_t i = 0; i < a->n_children; i++) {
        struct ArrowArray *child = a->children[i];
        if (child->release) child->release(child);
        free(child);
    }
    free(a->children);
    Owned *own = a->private_data;
    if (own) {
        free(own->owned[0]);
        free(own->owned[1]);
        text_unref(own->text);
        free(own);
    }
    a->release = NULL;
}

static void release_schema(struct ArrowSchema *s) {
    for (int64_t i = 0; i < s->n_children; i++) {
        struct ArrowSchema *child = s->children[i];
        if (child->release) child->release(child);
        free(child);
    }
    free(s->children);
    s->release = NULL;
}

static const uint64_t EMPTY_VALUES[2] = {0, 0}; /* a buffer for no rows (never NULL) */

/* A leaf array of ``rows`` over ``values`` (taken: freed on release), with ``mask`` (taken;
 * NULL when no row is null). */
static struct ArrowArray *leaf(size_t rows, void *values, uint8_t *mask, int64_t nulls) {
    struct ArrowArray *a = calloc(1, sizeof *a);
    Owned *own = calloc(1, sizeof *own);
    if (!a || !own) {
        free(a);
        free(own);
        free(values);
        free(mask);
        return NULL;
    }
    own->owned[0] = mask;
    own->owned[1] = values;
    own->buffers[0] = mask;
    own->buffers[1] = values ? values : (const void *)EMPTY_VALUES;
    a->length = (int64_t)rows;
    a->null_count = nulls;
    a->n_buffers = 2;
    a->buffers = own->buffers;
    a->release = release_array;
    a->private_data = own;
    return a;
}

/* A string view leaf: also the text buffer and its length (Arrow's variadic sizes). */
static struct ArrowArray *view_leaf(size_t rows, uint8_t *views, uint8_t *mask, int64_t nulls,
                                    Text *text) {
    struct ArrowArray *a = leaf(rows, views, mask, nulls);
    if (!a) return NULL;
    Owned *own = a->private_data;
    REF_ADD(&text->refs);
    own->text = text;
    own->text_len = text->len;
    own->buffers[2] = text->data ? text->data : (const void *)EMPTY_VALUES;
    own->buffers[3] = &own->text_len;
    a->n_buffers = 4;
    return a;
}

/* The null mask of rows whose tag is in ``valid`` (a bit per tag); NULL with *nulls 0 when
 * every row is valid. *failed is set when out of memory. */
static uint8_t *mask_of(const uint8_t *tags, size_t rows, unsigned valid, int64_t *nulls,
                        int *failed) {
    size_t invalid = 0;
    for (size_t i = 0; i < rows; i++) invalid += !((valid >> tags[i]) & 1);
    *nulls = (int64_t)invalid;
    if (!invalid) return NULL;
    uint8_t *mask = calloc((rows + 7) / 8, 1);
    if (!mask) { *failed = 1; return NULL; }
    for (size_t i = 0; i < rows; i++) mask[i >> 3] |= (uint8_t)(((valid >> tags[i]) & 1) << (i & 7));
    return mask;
}

/* Views of ``rows`` ids (uint32, or int32 with -1 for null, or int64 values with tags whose
 * TAG_STR rows only are valid). */
static uint8_t *views_of(const Strings *strings, const void *ids, int width, size_t rows) {
    uint8_t *views = malloc(rows ? 16 * rows : 16);
    if (!views) return NULL;
    for (size_t i = 0; i < rows; i++) {
        int64_t id = width == 4 ? (int64_t)((const uint32_t *)ids)[i]
                   : width == -4 ? (int64_t)((const int32_t *)ids)[i]
                                 : ((const int64_t *)ids)[i];
        if (id >= 0 && (size_t)id < strings->count) memcpy(views + 16 * i, strings->views + 16 * id, 16);
        else memset(views + 16 * i, 0, 16);
    }
    return views;
}

/* The columns of one part being exported. */
typedef struct {
    struct ArrowArray *arrays[N_TAGGED + N_RAW + 4];
    const char *names[N_TAGGED + N_RAW + 4];
    const char *formats[N_TAGGED + N_RAW + 4];
    int n;
    int failed;
} Export;

/* A part exported: its text columns each an array of its own (Polars keeps an imported
 * buffer's whole array alive: a name gathered from a struct's column kept every column of the
 * struct allocated, 21 MB of the bench trace's export for a 60-row frame of iterations), the
 * other columns one struct array. */
typedef struct {
    struct ArrowSchema *schema;
    struct ArrowArray *array;
    int ntexts;
    const char *text_names[N_TAGGED + N_RAW + 4];
    struct ArrowSchema *text_schemas[N_TAGGED + N_RAW + 4];
    struct ArrowArray *text_arrays[N_TAGGED + N_RAW + 4];
} PartExport;

static void part_export_free(PartExport *pe) {
    if (pe->schema) { if (pe->schema->release) pe->schema->release(pe->schema); free(pe->schema); }
    if (pe->array) { if (pe->array->release) pe->array->release(pe->array); free(pe->array); }
    for (int i = 0; i < pe->ntexts; i++) {
        struct ArrowSchema *ts = pe->text_schemas[i];
        struct ArrowArray *ta = pe->text_arrays[i];
        if (ts) { if (ts->release) ts->release(ts); free(ts); }
        if (ta) { if (ta->release) ta->release(ta); free(ta); }
    }
    memset(pe, 0, sizeof *pe);
}

static void export_add(Export *x, const char *name, const char *format, struct ArrowArray *a) {
    if (!a) { x->failed = 1; return; }
    x->arrays[x->n] = a;
    x->names[x->n] = name;
    x->formats[x->n] = format;
    x->n++;
}

/* Moves b's memory out (b is left empty). */
static void *take(Buf *b) {
    void *data = b->data;
    b->data = NULL;
    b->len = b->cap = 0;
    return data;
}

static unsigned tags_of(const uint8_t *tags, size_t rows) {
    unsigned seen = 0;
    for (size_t i = 0; i < rows; i++) seen |= 1u << tags[i];
    return seen;
}

/* Tagged column i of p, exported as ``type`` says, or left in p (not exportable). */
static void export_tagged(Export *x, Part *p, int i, int type, const Strings *names) {
    size_t rows = p->rows;
    const uint8_t *tags = (const uint8_t *)p->tag[i].data;
    unsigned seen = tags_of(tags, rows);
    const unsigned INT = 1u << TAG_INT, FLOAT = 1u << TAG_FLOAT, STR = 1u << TAG_STR;
    int64_t nulls = 0;
    int failed = 0;
    uint8_t *mask;
    switch (type) {
    case X_INT:
        if (seen & (FLOAT | STR)) return;
        /* fall through: only ints and nulls */
    case X_INT_ONLY:
        mask = mask_of(tags, rows, INT, &nulls, &failed);
        if (failed) break;
        export_add(x, TAGGED_NAMES[i], "l", leaf(rows, take(&p->value[i]), mask, nulls));
        buf_free(&p->tag[i]);
        return;
    case X_FLOAT: {
        if (seen & STR) return; /* text ("4") reads as its number in Python */
        mask = mask_of(tags, rows, INT | FLOAT, &nulls, &failed);
        if (failed) break;
        int64_t *values = (int64_t *)p->value[i].data;
        for (size_t r = 0; r < rows; r++) {
            if (tags[r] != TAG_INT) continue;
            double d = (double)values[r];
            memcpy(&values[r], &d, 8);
        }
        export_add(x, TAGGED_NAMES[i], "g", leaf(rows, take(&p->value[i]), mask, nulls));
        buf_free(&p->tag[i]);
        return;
    }
    case X_TEXT: {
        /* with an int (its digits become the text), or no text at all (a null column of
         * Python's, without 16 bytes of views a row) */
        if ((seen & INT) || !(seen & STR)) return;
        mask = mask_of(tags, rows, STR, &nulls, &failed);
        if (failed) break;
        uint8_t *views = views_of(names, p->value[i].data, 8, rows);
        /* rows not valid got some name's view: masked, and their ids are in range anyway */
        export_add(x, TAGGED_NAMES[i], "vu", views ? view_leaf(rows, views, mask, nulls, names->text)
                                                   : (free(mask), NULL));
        buf_free(&p->value[i]);
        buf_free(&p->tag[i]);
        return;
    }
    default:
        return;
    }
    x->failed = 1;
}

/* A struct array (and its schema) of the exported columns: the caller owns both. */
static int export_struct(Export *x, size_t rows, struct ArrowSchema **schema_out,
                         struct ArrowArray **array_out) {
    struct ArrowSchema *schema = calloc(1, sizeof *schema);
    struct ArrowArray *array = calloc(1, sizeof *array);
    Owned *own = calloc(1, sizeof *own);
    struct ArrowSchema **schemas = calloc((size_t)x->n + 1, sizeof *schemas);
    struct ArrowArray **arrays = calloc((size_t)x->n + 1, sizeof *arrays);
    if (!schema || !array || !own || !schemas || !arrays) goto fail;
    for (int i = 0; i < x->n; i++) {
        schemas[i] = calloc(1, sizeof **schemas);
        if (!schemas[i]) goto fail;
        schemas[i]->format = x->formats[i];
        schemas[i]->name = x->names[i];
        schemas[i]->flags = ARROW_FLAG_NULLABLE;
        schemas[i]->release = release_schema;
        arrays[i] = x->arrays[i];
        x->arrays[i] = NULL;
    }
    schema->format = "+s";
    schema->name = "";
    schema->n_children = x->n;
    schema->children = schemas;
    schema->release = release_schema;
    array->length = (int64_t)rows;
    array->n_buffers = 1;
    array->buffers = own->buffers; /* no null mask: buffers[0] stays NULL */
    array->n_children = x->n;
    array->children = arrays;
    array->release = release_array;
    array->private_data = own;
    *schema_out = schema;
    *array_out = array;
    return 0;
fail:
    if (schemas)
        for (int i = 0; i < x->n; i++) free(schemas[i]);
    free(schemas);
    free(arrays);
    free(own);
    free(schema);
    free(array);
    return -1;
}

static void export_discard(Export *x) {
    for (int i = 0; i < x->n; i++) {
        if (!x->arrays[i]) continue;
        x->arrays[i]->release(x->arrays[i]);
        free(x->arrays[i]);
    }
    x->n = 0;
}

/* Part p's columns as a struct array (those exported leave p's buffers empty). */
/* Move x's text columns (string views) into pe, each with a schema of its own. */
static int split_texts(Export *x, PartExport *pe) {
    int kept = 0;
    for (int i = 0; i < x->n; i++) {
        if (strcmp(x->formats[i], "vu") != 0) {
            x->arrays[kept] = x->arrays[i];
            x->names[kept] = x->names[i];
            x->formats[kept] = x->formats[i];
            kept++;
            continue;
        }
        struct ArrowSchema *schema = calloc(1, sizeof *schema);
        if (!schema) {
            /* the rest stay in x (discarded by the caller); this one is released here */
            x->arrays[i]->release(x->arrays[i]);
            free(x->arrays[i]);
            for (int j = i + 1; j < x->n; j++) x->arrays[kept++] = x->arrays[j];
            x->n = kept;
            return -1;
        }
        schema->format = "vu";
        schema->name = x->names[i];
        schema->flags = ARROW_FLAG_NULLABLE;
        schema->release = release_schema;
        pe->text_names[pe->ntexts] = x->names[i];
        pe->text_schemas[pe->ntexts] = schema;
        pe->text_arrays[pe->ntexts] = x->arrays[i];
        pe->ntexts++;
    }
    x->n = kept;
    return 0;
}

static int export_part(Scanner *s, Part *p, const Strings *names, const Strings *raws,
                       PartExport *pe) {
    Export x = {0};
    size_t rows = p->rows;
    int kind = p->kind;
    uint8_t *views = views_of(names, p->name.data, 4, rows);
    export_add(&x, "name", "vu", views ? view_leaf(rows, views, NULL, 0, names->text) : NULL);
    buf_free(&p->name);
    if (KIND_PHASE[kind]) {
        views = views_of(names, p->phase.data, 4, rows);
        export_add(&x, "phase", "vu", views ? view_leaf(rows, views, NULL, 0, names->text) : NULL);
        buf_free(&p->phase);
    }
    export_add(&x, "ts_ns", "l", leaf(rows, take(&p->ts), NULL, 0));
    if (KIND_DUR[kind]) export_add(&x, "dur_ns", "l", leaf(rows, take(&p->dur), NULL, 0));
    for (int i = 0; i < N_TAGGED; i++)
        if (p->tag[i].data && !x.failed) export_tagged(&x, p, i, TAGGED_EXPORT[i], names);
    if (KIND_RAW[kind]) {
        for (int r = 0; r < N_RAW && !x.failed; r++) {
            int failed = 0;
            int64_t nulls = 0;
            const int32_t *ids = (const int32_t *)p->raw[r].data;
            size_t invalid = 0;
            for (size_t i = 0; i < rows; i++) invalid += ids[i] < 0;
            uint8_t *mask = NULL;
            if (invalid) {
                mask = calloc((rows + 7) / 8, 1);
                if (!mask) failed = 1;
                else
                    for (size_t i = 0; i < rows; i++) mask[i >> 3] |= (uint8_t)((ids[i] >= 0) << (i & 7));
            }
            nulls = (int64_t)invalid;
            views = failed ? NULL : views_of(raws, ids, -4, rows);
            export_add(&x, RAW_NAMES[r], "vu",
                       views ? view_leaf(rows, views, mask, nulls, raws->text) : (free(mask), NULL));
            buf_free(&p->raw[r]);
        }
    }
    if (x.failed || split_texts(&x, pe) || export_struct(&x, rows, &pe->schema, &pe->array)) {
        export_discard(&x);
        return -1;
    }
    return 0;
}

/* A Python object holding an exported array until Polars takes it (__arrow_c_array__). */
typedef struct {
    PyObject_HEAD
    struct ArrowSchema *schema;
    struct ArrowArray *array;
} Exported;

static void Exported_dealloc(Exported *self) {
    if (self->schema) {
        if (self->schema->release) self->schema->release(self->schema);
        free(self->schema);
    }
    if (self->array) {
        if (self->array->release) self->array->release(self->array);
        free(self->array);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void schema_capsule_free(PyObject *capsule) {
    struct ArrowSchema *s = PyCapsule_GetPointer(capsule, "arrow_schema");
    if (!s) { PyErr_Clear(); return; }
    if (s->release) s->release(s);
    free(s);
}

static void array_capsule_free(PyObject *capsule) {
    struct ArrowArray *a = PyCapsule_GetPointer(capsule, "arrow_array");
    if (!a) { PyErr_Clear(); return; }
    if (a->release) a->release(a);
    free(a);
}

/* The Arrow PyCapsule interface: the array moves into the capsules (once). */
static PyObject *Exported_arrow_c_array(Exported *self, PyObject *args, PyObject *kw) {
    static char *keywords[] = {"requested_schema", NULL};
    PyObject *requested = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", keywords, &requested)) return NULL;
    if (requested != Py_None) {
        PyErr_SetString(PyExc_NotImplementedError, "the columns are exported with their own types");
        return NULL;
    }
    if (!self->schema || !self->array) {
        PyErr_SetString(PyExc_RuntimeError, "the columns were already handed over");
        return NULL;
    }
    PyObject *schema = PyCapsule_New(self->schema, "arrow_schema", schema_capsule_free);
    if (!schema) return NULL;
    self->schema = NULL;
    PyObject *array = PyCapsule_New(self->array, "arrow_array", array_capsule_free);
    if (!array) { Py_DECREF(schema); return NULL; }
    self->array = NULL;
    return Py_BuildValue("(NN)", schema, array);
}

static PyMethodDef Exported_methods[] = {
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))Exported_arrow_c_array,
     METH_VARARGS | METH_KEYWORDS, "(schema, array) capsules of the Arrow C data interface."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ExportedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceanalyze.load._scan.Exported",
    .tp_basicsize = sizeof(Exported),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Exported_dealloc,
    .tp_methods = Exported_methods,
    .tp_doc = "Scanned columns as an Arrow struct array, taken once (pl.DataFrame(it)).",
};

static PyObject *exported_of(struct ArrowSchema *schema, struct ArrowArray *array) {
    Exported *e = PyObject_New(Exported, &ExportedType);
    if (!e) {
        schema->release(schema);
        free(schema);
        array->release(array);
        free(array);
        return NULL;
    }
    e->schema = schema;
    e->array = array;
    return (PyObject *)e;
}

/* A table's strings as one exported string view array (id -> text), for the Python code. */
static int export_strings(const Strings *strings, struct ArrowSchema **schema_out,
                          struct ArrowArray **array_out) {
    size_t bytes = strings->count ? 16 * strings->count : 16;
    uint8_t *views = malloc(bytes);
    struct ArrowSchema *schema = calloc(1, sizeof *schema);
    if (!views || !schema) { free(views); free(schema); return -1; }
    memcpy(views, strings->views, strings->count * 16);
    struct ArrowArray *array = view_leaf(strings->count, views, NULL, 0, strings->text);
    if (!array) { free(schema); return -1; }
    schema->format = "vu";
    schema->name = "";
    schema->flags = ARROW_FLAG_NULLABLE;
    schema->release = release_schema;
    *schema_out = schema;
    *array_out = array;
    return 0;
}

static PyObject *bytes_of(Buf *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
}

/* A column's memory handed over to Python without a copy: a read-only buffer object that
 * frees it when the last view of it (a numpy array, a Polars series built on one) is gone.
 * Copying every column into bytes took a tenth of a load's decoding, and held the columns
 * twice at the peak. */
typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
} Column;

static int Column_getbuffer(Column *self, Py_buffer *view, int flags) {
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : empty, self->len, 1,
                             flags);
}

static void Column_dealloc(Column *self) {
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs Column_as_buffer = {(getbufferproc)Column_getbuffer, NULL};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceanalyze.load._scan.Column",
    .tp_basicsize = sizeof(Column),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Column_dealloc,
    .tp_as_buffer = &Column_as_buffer,
    .tp_doc = "A scanned column's bytes (read-only buffer), owned without a copy.",
};

/* Moves b's memory into a Column (b is left empty). */
static PyObject *column_of(Buf *b) {
    Column *column = PyObject_New(Column, &ColumnType);
    if (!column) return NULL;
    column->data = b->data;
    column->len = (Py_ssize_t)b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return (PyObject *)column;
}

/* A validated JSON string's contents as a Python str (escapes resolved). */
static PyObject *decode_string(const char *s, size_t n) {
    if (!memchr(s, '\\', n)) return PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, "strict");
    Buf out = {0};
    if (unescape_into(&out, s, n)) {
        buf_free(&out);
        return PyErr_NoMemory();
    }
    PyObject *text = PyUnicode_DecodeUTF8(out.data ? out.data : "", (Py_ssize_t)out.len, "strict");
    buf_free(&out);
    return text;
}

static PyObject *strings_of(Intern *t, int as_text) {
    PyObject *list = PyList_New((Py_ssize_t)t->count);
    if (!list) return NULL;
    for (size_t i = 0; i < t->count; i++) {
        size_t n;
        const char *s = intern_str(t, (uint32_t)i, &n);
        PyObject *item = as_text ? decode_string(s, n) : PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, "strict");
        if (!item) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

static int set_item(PyObject *d, const char *key, PyObject *value) {
    if (!value) return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

/* A part: its kind, category, rows, its exported columns (the text columns in "texts", name ->
 * array, the others one struct array, "table"), and the tagged columns not exported, as
 * (values, tags) buffers. */
static PyObject *part_dict(Part *p, PyObject *table, PyObject *texts) {
    PyObject *d = PyDict_New();
    if (!d) {
        Py_DECREF(table);
        Py_DECREF(texts);
        return NULL;
    }
    if (set_item(d, "table", table) || set_item(d, "texts", texts) ||
        set_item(d, "kind", PyLong_FromLong(p->kind)) ||
        set_item(d, "cat", PyLong_FromLong(p->cat)) || set_item(d, "rows", PyLong_FromSize_t(p->rows)))
        goto fail;
    for (int i = 0; i < N_TAGGED; i++) {
        if (!p->tag[i].data) continue; /* exported, or not a column of this kind */
        PyObject *pair = Py_BuildValue("(NN)", column_of(&p->value[i]), column_of(&p->tag[i]));
        if (set_item(d, TAGGED_NAMES[i], pair)) goto fail;
    }
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

/* Every part exported (GIL released: no Python object is touched); -1 when out of memory. */
static int export_all(Scanner *self, Strings *names, Strings *raws, PartExport *parts,
                      struct ArrowSchema **names_schema, struct ArrowArray **names_array) {
    if (strings_build(names, &self->names, 1) || strings_build(raws, &self->raws, 0)) return -1;
    for (size_t i = 0; i < self->nparts; i++) {
        part_lengths(&self->parts[i]);
        if (export_part(self, &self->parts[i], names, raws, &parts[i])) return -1;
    }
    return export_strings(names, names_schema, names_array);
}

/* pe's text columns as a dict (name -> Exported); pe gives them up. */
static PyObject *texts_dict(PartExport *pe) {
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < pe->ntexts; i++) {
        /* exported_of takes the arrays (it releases them when it fails) */
        PyObject *one = exported_of(pe->text_schemas[i], pe->text_arrays[i]);
        pe->text_schemas[i] = NULL;
        pe->text_arrays[i] = NULL;
        if (set_item(d, pe->text_names[i], one)) Py_CLEAR(d);
    }
    return d; /* on failure, what was not handed over stays in pe */
}

static PyObject *Scanner_result(Scanner *self, PyObject *unused) {
    if (self->taken) {
        PyErr_SetString(PyExc_RuntimeError, "the scanner's result was already taken");
        return NULL;
    }
    self->taken = 1; /* the parts' memory moves into the result */
    size_t nparts = self->nparts;
    Strings names = {0}, raws = {0};
    PartExport *exports = calloc(nparts + 1, sizeof *exports);
    struct ArrowSchema *names_schema = NULL;
    struct ArrowArray *names_array = NULL;
    PyObject *d = NULL, *parts = NULL;
    int failed = !exports;
    if (!failed) {
        Py_BEGIN_ALLOW_THREADS
        failed = export_all(self, &names, &raws, exports, &names_schema, &names_array);
        Py_END_ALLOW_THREADS
    }
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    d = PyDict_New();
    parts = d ? PyList_New((Py_ssize_t)nparts) : NULL;
    if (!parts) goto done;
    /* each exported array now belongs to a Python object (NULLed here as it is handed over) */
    for (size_t i = 0; i < nparts; i++) {
        PartExport *pe = &exports[i];
        PyObject *texts = texts_dict(pe);
        PyObject *table = texts ? exported_of(pe->schema, pe->array) : NULL;
        if (texts) {
            pe->schema = NULL;
            pe->array = NULL;
        }
        PyObject *p = table ? part_dict(&self->parts[i], table, texts) : NULL;
        if (!table) Py_XDECREF(texts);
        if (!p) goto done;
        PyList_SET_ITEM(parts, (Py_ssize_t)i, p);
    }
    PyObject *names_table = exported_of(names_schema, names_array);
    names_schema = NULL;
    names_array = NULL;
    PyObject *list = parts;
    parts = NULL;
    if (set_item(d, "parts", list) || set_item(d, "names", names_table) ||
        set_item(d, "cats", strings_of(&self->cats, 1)) || set_item(d, "counts", bytes_of(&self->counts)) ||
        set_item(d, "header", bytes_of(&self->header)) || set_item(d, "bare", PyBool_FromLong(self->bare)) ||
        set_item(d, "has_events", PyBool_FromLong(self->seen_events)) ||
        set_item(d, "events", PyLong_FromLongLong(self->events))) {
        Py_CLEAR(d);
    }
done:
    for (size_t i = 0; exports && i < nparts; i++) part_export_free(&exports[i]);
    free(exports);
    if (names_schema) { if (names_schema->release) names_schema->release(names_schema); free(names_schema); }
    if (names_array) { if (names_array->release) names_array->release(names_array); free(names_array); }
    strings_free(&names);
    strings_free(&raws);
    Py_XDECREF(parts);
    if (!d || PyErr_Occurred()) {
        Py_XDECREF(d);
        return NULL;
    }
    return d;
}

static PyMethodDef Scanner_methods[] = {
    {"feed", (PyCFunction)Scanner_feed, METH_VARARGS,
     "feed(buffer, final=False) -> bytes consumed (complete items only)."},
    {"result", (PyCFunction)Scanner_result, METH_NOARGS,
     "The columns scanned (once: their memory moves into the result; feeding then stops)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceanalyze.load._scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
    .tp_doc = "Scanner(kinds): Chrome trace JSON -> typed columns, chunk by chunk.",
};

static struct PyModuleDef scan_module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__scan(void) {
    if (PyType_Ready(&ScannerType) < 0 || PyType_Ready(&ColumnType) < 0 ||
        PyType_Ready(&ExportedType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&scan_module);
    if (!m) return NULL;
    Unsupported = PyErr_NewException("traceanalyze.load._scan.Unsupported", NULL, NULL);
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) ||
        PyModule_AddObject(m, "Unsupported", Unsupported)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/* The index of idempotency keys of one frontend process (hermes.frontend.idempotency): one flat table of fixed
 * 48-byte slots, open addressing with linear probing, doubled when half full. A slot holds a key's 128-bit XXH3 (the
 * caller's digest of <topic>/<key>), its first publish's body digest (XXH3-64), message id (a UUID's 128 bits) and
 * the end of its window with whether it was answered 201; a first publish in flight has no end of window yet.
 * No Python object per key: nothing for the garbage collector, one cache line or two per look-up (a dict of ints
 * cost a frontend 2-3 µs per keyed publish in its memory and collections, docs/benchmarks.md). Keys whose window is
 * over are answered as unknown at once, and their slots emptied by a sweep of the table a little at a time
 * (`expire`) and by its growth. Deletion shifts the slots after it back, so that no tombstone is left behind. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef struct {
    uint64_t hi, lo;       /* the key's digest; both 0: an empty slot */
    uint64_t digest;       /* the first publish's body's digest */
    uint64_t id_hi, id_lo; /* its message id */
    uint64_t until;        /* the end of its window in epoch ms << 1 | answered 201; 0: in flight */
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    size_t mask; /* the capacity (a power of 2) - 1 */
    size_t count;
    size_t cursor; /* where the sweep goes on */
} KeyIndex;

enum { INITIAL_CAPACITY = 1024, REUSED = 0, IN_FLIGHT = 1 };

/* Epoch milliseconds, rounded down; up (`late`) for the start of a window, which ends a little late, never early. */
static uint64_t
now_ms(int late)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (uint64_t)now.tv_sec * 1000 + ((uint64_t)now.tv_nsec + (late ? 999999 : 0)) / 1000000;
}

static inline int
is_empty(const Slot *slot)
{
    return slot->hi == 0 && slot->lo == 0;
}

static inline int
is_live(const Slot *slot, uint64_t now)
{
    return slot->until == 0 || (slot->until >> 1) > now;
}

/* The key's slot, or the empty one where it would go. */
static Slot *
find(Slot *slots, size_t mask, uint64_t hi, uint64_t lo)
{
    size_t i = lo & mask;
    for (;;) {
        Slot *slot = &slots[i];
        if ((slot->hi == hi && slot->lo == lo) || is_empty(slot)) {
            return slot;
        }
        i = (i + 1) & mask;
    }
}

/* A new table of `capacity` slots with the live keys of this one (those whose window is over are left out). */
static int
rehash(KeyIndex *self, size_t capacity)
{
    Slot *slots = PyMem_RawCalloc(capacity, sizeof(Slot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    uint64_t now = now_ms(0);
    size_t count = 0;
    for (size_t i = 0; i <= self->mask; i++) {
        Slot *slot = &self->slots[i];
        if (!is_empty(slot) && is_live(slot, now)) {
            *find(slots, capacity - 1, slot->hi, slot->lo) = *slot;
            count++;
        }
    }
    PyMem_RawFree(self->slots);
    self->slots = slots;
    self->mask = capacity - 1;
    self->count = count;
    self->cursor = 0;
    return 0;
}

/* The key's slot, taken if it was empty (the table grown first when it would be over half full). */
static Slot *
take(KeyIndex *self, uint64_t hi, uint64_t lo)
{
    Slot *slot = find(self->slots, self->mask, hi, lo);
    if (!is_empty(slot)) {
        return slot;
    }
    if (2 * (self->count + 1) > self->mask + 1) { /* doubled, unless the keys left would fill a quarter at most */
        uint64_t now = now_ms(0);
        size_t live = 0, capacity = self->mask + 1;
        for (size_t i = 0; i < capacity; i++) {
            live += !is_empty(&self->slots[i]) && is_live(&self->slots[i], now);
        }
        if (rehash(self, 4 * (live + 1) > capacity ? 2 * capacity : capacity) < 0) {
            return NULL;
        }
        slot = find(self->slots, self->mask, hi, lo);
    }
    slot->hi = hi;
    slot->lo = lo;
    self->count++;
    return slot;
}

/* Empties slot i, moving back the slots after it that would no longer be found past the hole. */
static void
delete_at(KeyIndex *self, size_t i)
{
    size_t mask = self->mask;
    Slot *slots = self->slots;
    for (size_t j = (i + 1) & mask; !is_empty(&slots[j]); j = (j + 1) & mask) {
        size_t home = slots[j].lo & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) { /* the hole lies between its home and it */
            slots[i] = slots[j];
            i = j;
        }
    }
    memset(&slots[i], 0, sizeof(Slot));
    self->count--;
}

static int
key_digest(PyObject *named, uint64_t *hi, uint64_t *lo)
{
    if (!PyBytes_Check(named) || PyBytes_GET_SIZE(named) != 16) {
        PyErr_SetString(PyExc_TypeError, "a key's digest is 16 bytes");
        return -1;
    }
    const char *bytes = PyBytes_AS_STRING(named);
    memcpy(hi, bytes, 8);
    memcpy(lo, bytes + 8, 8);
    if (*hi == 0 && *lo == 0) { /* the empty slot's: a chance of 2^-128, taken as another */
        *lo = 1;
    }
    return 0;
}

static int
body_digest(PyObject *digest, uint64_t *value)
{
    *value = PyLong_AsUnsignedLongLong(digest);
    return (*value == (uint64_t)-1 && PyErr_Occurred()) ? -1 : 0;
}

static int
hex_value(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    return -1;
}

/* A message id's 128 bits: 0 when it is not a UUID in its canonical form (lower-case hex), -1 on an error. */
static int
uuid_bits(PyObject *text, uint64_t *hi, uint64_t *lo)
{
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "a message id is a str");
        return -1;
    }
    if (!PyUnicode_IS_ASCII(text) || PyUnicode_GET_LENGTH(text) != 36) {
        return 0;
    }
    const char *chars = (const char *)PyUnicode_DATA(text);
    uint64_t halves[2] = {0, 0};
    int digits = 0;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (chars[i] != '-') {
                return 0;
            }
            continue;
        }
        int value = hex_value(chars[i]);
        if (value < 0) {
            return 0;
        }
        halves[digits / 16] = halves[digits / 16] << 4 | (uint64_t)value;
        digits++;
    }
    *hi = halves[0];
    *lo = halves[1];
    return 1;
}

static PyObject *
uuid_text(uint64_t hi, uint64_t lo)
{
    static const char HEX[] = "0123456789abcdef";
    char text[36];
    int digit = 0;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            text[i] = '-';
            continue;
        }
        uint64_t half = digit < 16 ? hi : lo;
        text[i] = HEX[(half >> (60 - 4 * (digit % 16))) & 0xf];
        digit++;
    }
    return PyUnicode_FromStringAndSize(text, 36);
}

static int
check_arguments(const char *name, Py_ssize_t given, Py_ssize_t wanted)
{
    if (given != wanted) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, wanted, given);
        return -1;
    }
    return 0;
}

/* claim(named, digest): None when the key is new here (it is in flight from now); IN_FLIGHT when its first publish
 * is, with the same body; (message id, answered 201) of its first publish within its window; REUSED when either is
 * with another body. */
static PyObject *
KeyIndex_claim(KeyIndex *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t hi, lo, digest;
    if (check_arguments("claim", nargs, 2) < 0 || key_digest(args[0], &hi, &lo) < 0 ||
        body_digest(args[1], &digest) < 0) {
        return NULL;
    }
    Slot *slot = find(self->slots, self->mask, hi, lo);
    if (!is_empty(slot) && is_live(slot, now_ms(0))) {
        if (slot->digest != digest) {
            return PyLong_FromLong(REUSED);
        }
        if (slot->until == 0) {
            return PyLong_FromLong(IN_FLIGHT);
        }
        PyObject *message_id = uuid_text(slot->id_hi, slot->id_lo);
        return message_id == NULL ? NULL : Py_BuildValue("(NO)", message_id, (slot->until & 1) ? Py_True : Py_False);
    }
    if (is_empty(slot) && (slot = take(self, hi, lo)) == NULL) {
        return NULL;
    }
    slot->digest = digest;
    slot->id_hi = slot->id_lo = 0;
    slot->until = 0;
    Py_RETURN_NONE;
}

/* Keeps a key's first publish: returns False when its message id is no UUID in its canonical form. */
static int
keep(KeyIndex *self, PyObject *const *args, uint64_t until)
{
    uint64_t hi, lo, digest, id_hi, id_lo;
    if (key_digest(args[0], &hi, &lo) < 0 || body_digest(args[1], &digest) < 0) {
        return -1;
    }
    int valid = uuid_bits(args[2], &id_hi, &id_lo);
    int acknowledged = PyObject_IsTrue(args[3]);
    if (valid <= 0 || acknowledged < 0) {
        return acknowledged < 0 ? -1 : valid;
    }
    Slot *slot = take(self, hi, lo);
    if (slot == NULL) {
        return -1;
    }
    slot->digest = digest;
    slot->id_hi = id_hi;
    slot->id_lo = id_lo;
    slot->until = until << 1 | (uint64_t)acknowledged;
    return 1;
}

static int
milliseconds(PyObject *value, uint64_t *ms)
{
    *ms = PyLong_AsUnsignedLongLong(value);
    if (*ms == (uint64_t)-1 && PyErr_Occurred()) {
        return -1;
    }
    if (*ms >= ((uint64_t)1 << 62)) {
        PyErr_SetString(PyExc_OverflowError, "milliseconds out of range");
        return -1;
    }
    return 0;
}

/* answered(named, digest, message_id, acknowledged, window_ms): the first publish in flight was answered; its
 * window ends window_ms from now, which is returned. */
static PyObject *
KeyIndex_answered(KeyIndex *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t window;
    if (check_arguments("answered", nargs, 5) < 0 || milliseconds(args[4], &window) < 0) {
        return NULL;
    }
    uint64_t until = now_ms(1) + window;
    int kept = keep(self, args, until);
    if (kept <= 0) {
        if (kept == 0) {
            PyErr_SetString(PyExc_ValueError, "a message id of this frontend's is a UUID");
        }
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(until);
}

/* learn(named, digest, message_id, acknowledged, until): a key answered elsewhere (another frontend, before a
 * restart), its window ending at until (epoch ms); False when its message id is no UUID (no entry of this code's). */
static PyObject *
KeyIndex_learn(KeyIndex *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t until;
    if (check_arguments("learn", nargs, 5) < 0 || milliseconds(args[4], &until) < 0) {
        return NULL;
    }
    int kept = keep(self, args, until);
    return kept < 0 ? NULL : PyBool_FromLong(kept);
}

/* forget(named, digest): a first publish in flight was refused: its key is forgotten, unless another publish took
 * it meanwhile (learnt from another frontend). */
static PyObject *
KeyIndex_forget(KeyIndex *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t hi, lo, digest;
    if (check_arguments("forget", nargs, 2) < 0 || key_digest(args[0], &hi, &lo) < 0 ||
        body_digest(args[1], &digest) < 0) {
        return NULL;
    }
    Slot *slot = find(self->slots, self->mask, hi, lo);
    if (!is_empty(slot) && slot->until == 0 && slot->digest == digest) {
        delete_at(self, (size_t)(slot - self->slots));
    }
    Py_RETURN_NONE;
}

/* expire(slots): looks at that many more slots (the whole table at most), empties those whose window is over, and
 * returns how many it emptied. */
static PyObject *
KeyIndex_expire(KeyIndex *self, PyObject *budget_object)
{
    Py_ssize_t budget = PyLong_AsSsize_t(budget_object);
    if (budget == -1 && PyErr_Occurred()) {
        return NULL;
    }
    size_t capacity = self->mask + 1, steps = budget < 0 ? 0 : (size_t)budget, emptied = 0;
    if (steps > capacity) {
        steps = capacity;
    }
    uint64_t now = now_ms(0);
    size_t i = self->cursor;
    while (steps-- > 0) {
        Slot *slot = &self->slots[i];
        if (!is_empty(slot) && !is_live(slot, now)) {
            delete_at(self, i); /* a slot after it may have moved here: looked at again */
            emptied++;
        } else {
            i = (i + 1) & self->mask;
        }
    }
    self->cursor = i;
    return PyLong_FromSize_t(emptied);
}

static int
KeyIndex_contains(KeyIndex *self, PyObject *named)
{
    uint64_t hi, lo;
    if (key_digest(named, &hi, &lo) < 0) {
        return -1;
    }
    return !is_empty(find(self->slots, self->mask, hi, lo));
}

static Py_ssize_t
KeyIndex_length(KeyIndex *self)
{
    return (Py_ssize_t)self->count;
}

static PyObject *
KeyIndex_capacity(KeyIndex *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(self->mask + 1);
}

static PyObject *
KeyIndex_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "KeyIndex() takes no arguments");
        return NULL;
    }
    KeyIndex *self = (KeyIndex *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->slots = PyMem_RawCalloc(INITIAL_CAPACITY, sizeof(Slot));
    if (self->slots == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->mask = INITIAL_CAPACITY - 1;
    return (PyObject *)self;
}

static void
KeyIndex_dealloc(KeyIndex *self)
{
    PyMem_RawFree(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef KeyIndex_methods[] = {
    {"claim", (PyCFunction)(void (*)(void))KeyIndex_claim, METH_FASTCALL, NULL},
    {"answered", (PyCFunction)(void (*)(void))KeyIndex_answered, METH_FASTCALL, NULL},
    {"learn", (PyCFunction)(void (*)(void))KeyIndex_learn, METH_FASTCALL, NULL},
    {"forget", (PyCFunction)(void (*)(void))KeyIndex_forget, METH_FASTCALL, NULL},
    {"expire", (PyCFunction)KeyIndex_expire, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef KeyIndex_getset[] = {
    {"capacity", (getter)KeyIndex_capacity, NULL, "slots in the table", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods KeyIndex_sequence = {
    .sq_length = (lenfunc)KeyIndex_length,
    .sq_contains = (objobjproc)KeyIndex_contains,
};

static PyTypeObject KeyIndexType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hermes.frontend.key_index.KeyIndex",
    .tp_doc = "The idempotency keys of this frontend process in one flat table.",
    .tp_basicsize = sizeof(KeyIndex),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = KeyIndex_new,
    .tp_dealloc = (destructor)KeyIndex_dealloc,
    .tp_methods = KeyIndex_methods,
    .tp_getset = KeyIndex_getset,
    .tp_as_sequence = &KeyIndex_sequence,
};

static struct PyModuleDef key_index_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hermes.frontend.key_index",
    .m_doc = "The index of idempotency keys in one flat table (hermes.frontend.idempotency).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit_key_index(void)
{
    if (PyType_Ready(&KeyIndexType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&key_index_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "REUSED", REUSED) < 0 ||
        PyModule_AddIntConstant(module, "IN_FLIGHT", IN_FLIGHT) < 0 ||
        PyModule_AddObjectRef(module, "KeyIndex", (PyObject *)&KeyIndexType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}

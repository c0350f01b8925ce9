/* The idempotency keys of one frontend process and the publish path's check of them (hermes.frontend.idempotency),
 * in C: a keyed publish cost a frontend 9-13 µs more than a plain one with this in Python, against the 3.5-4 µs
 * that issue 34 allows (docs/benchmarks.md).
 *
 * One flat table of 48-byte slots, open addressing with linear probing, doubled when half full. A slot holds a
 * key's 128-bit XXH3 (seeded with the XXH3-64 of its topic's name), its first publish's body digest (XXH3-64), the
 * message id (a UUID's 128 bits) and the end of its window with whether it was answered 201. No Python object per
 * key: nothing for the garbage collector, a cache line or two per look-up. A first publish in flight has no end of
 * window yet. Keys whose window is over are answered as unknown, and their slots emptied by a sweep of four slots
 * per key kept, at each flush, and by the table's growth; deletion shifts the slots after it back, so no tombstone
 * stays. Growing rehashes the table at once: at a million keys, a pause of tens of milliseconds.
 *
 * The keys answered since the last flush wait in an outbox of slots; `flush` hands them out as records of
 * hermes.idempotency: a magic and the slots as they are (little-endian), which `learn` reads back. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define XXH_INLINE_ALL /* Debian's libxxhash-dev: XXH3 as the xxhash package computes it */
#include <xxhash.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define LITTLE(x) __builtin_bswap64(x)
#else
#define LITTLE(x) (x)
#endif

typedef struct {
    uint64_t hi, lo;       /* the key's digest; both 0: an empty slot */
    uint64_t digest;       /* the first publish's body's digest */
    uint64_t id_hi, id_lo; /* its message id */
    uint64_t until;        /* the end of its window in epoch ms << 1 | answered 201; IN_FLIGHT or WAITED: in flight */
} Slot;

enum {
    IN_FLIGHT = 0, /* a first publish not answered yet */
    WAITED = 1,    /* and repeats of it wait for its answer */
    INITIAL_CAPACITY = 1024,
    TOPICS = 256,          /* the topics' seeds and windows cached, by the identity of their Topic */
    MAX_KEY_LENGTH = 255,  /* characters */
    SLOTS_PER_RECORD = 20000, /* 960,000 bytes: below Kafka's 1 MB records */
};
static const char MAGIC[8] = "\0hkeys1\n"; /* no JSON: a frontend of a version before ignores the record */
/* In 2286: an end of window later than this is no record of this code's. */
static const uint64_t NEVER = 10000000000000ULL;

typedef struct {
    PyObject *topic; /* held: its identity is not reused meanwhile */
    uint64_t seed;
    uint64_t window_ms;
} TopicKeys;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    size_t mask; /* the capacity (a power of 2) - 1 */
    size_t count;
    size_t cursor; /* where the sweep goes on */
    uint64_t moves; /* how many times slots moved (a growth, a deletion): a slot's address is good until the next */
    Slot *outbox;  /* answered since the last flush */
    int flush_due; /* kept() was called since the last flush */
    size_t outbox_count, outbox_capacity;
    TopicKeys topics[TOPICS];
    /* what the rare paths and the loop's side need, from hermes.frontend.idempotency */
    PyObject *result;   /* PublishResult */
    PyObject *rejected; /* rejected(topic, key, reused) -> the exception: a key that is no key, or another body */
    PyObject *wait;     /* wait(named, answer): a repeat of a first publish in flight here */
    PyObject *release;  /* release(named, outcome): the first publish of waiting repeats was answered */
    PyObject *spooled;  /* spooled(produce, topic, message_id, body, headers, key, answer): a body on disk */
    PyObject *kept;     /* kept(): the outbox has its first key since the last flush (the flush is due) */
} KeyTable;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    KeyTable *table;
    PyObject *answer; /* the publish's; NULL once called */
    Slot *slot;       /* its key's, while the table's slots have not moved since */
    uint64_t moves;
    uint64_t hi, lo, digest, window_ms;
} FirstPublish;

static PyTypeObject KeyTableType;
static PyTypeObject FirstPublishType;
static PyObject *FirstPublish_vectorcall(FirstPublish *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);

/* Epoch milliseconds. `precise`: rounded up, for the start of a window, which ends a little late, never early.
 * Else from the kernel's coarse clock, behind by a tick or so, for what is over (a key is then forgotten a little
 * late): reading the precise clock took 0.1 µs in a virtual machine, and a publish read it three times. */
static uint64_t
now_ms(int precise)
{
    struct timespec now;
    clock_gettime(precise ? CLOCK_REALTIME : CLOCK_REALTIME_COARSE, &now);
    return (uint64_t)now.tv_sec * 1000 + ((uint64_t)now.tv_nsec + (precise ? 999999 : 0)) / 1000000;
}

static inline int
is_empty(const Slot *slot)
{
    return slot->hi == 0 && slot->lo == 0;
}

static inline int
in_flight(const Slot *slot)
{
    return slot->until <= WAITED;
}

static inline int
is_live(const Slot *slot, uint64_t now)
{
    return in_flight(slot) || (slot->until >> 1) > now;
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
rehash(KeyTable *self, size_t capacity)
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
    self->moves++;
    return 0;
}

/* The key's slot, taken if it was empty (the table grown first when it would be over half full). */
static Slot *
take(KeyTable *self, uint64_t hi, uint64_t lo)
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
delete_at(KeyTable *self, size_t i)
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
    self->moves++;
}

/* Looks at `steps` more slots (the whole table at most) and empties those whose window is over. */
static void
sweep(KeyTable *self, size_t steps, uint64_t now)
{
    if (steps > self->mask + 1) {
        steps = self->mask + 1;
    }
    size_t i = self->cursor;
    while (steps > 0) {
        Slot *slot = &self->slots[i];
        if (!is_empty(slot) && !is_live(slot, now)) {
            delete_at(self, i); /* a slot after it may have moved here: looked at again, in the same step */
            continue;
        }
        i = (i + 1) & self->mask;
        steps--;
    }
    self->cursor = i;
}

static void
split(XXH128_hash_t hash, uint64_t *hi, uint64_t *lo)
{
    *hi = hash.high64;
    *lo = hash.low64;
    if (*hi == 0 && *lo == 0) { /* the empty slot's: a chance of 2^-128, taken as another */
        *lo = 1;
    }
}

/* The 128 bits of an int as the xxhash package's xxh3_128_intdigest gives them. */
static int
named_from(PyObject *named, uint64_t *hi, uint64_t *lo)
{
    unsigned char bytes[16];
    if (!PyLong_Check(named) || _PyLong_AsByteArray((PyLongObject *)named, bytes, 16, 0, 0) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "a key's digest is an int");
        }
        return -1;
    }
    XXH128_hash_t hash = XXH128_hashFromCanonical((const XXH128_canonical_t *)bytes);
    split(hash, hi, lo);
    return 0;
}

static PyObject *
named_to(uint64_t hi, uint64_t lo)
{
    unsigned char bytes[16];
    XXH128_canonical_t canonical;
    XXH128_hash_t hash = {.low64 = lo, .high64 = hi};
    XXH128_canonicalFromHash(&canonical, hash);
    memcpy(bytes, canonical.digest, 16);
    return _PyLong_FromByteArray(bytes, 16, 0, 0);
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

/* A message id's 128 bits: 0 when it is not a UUID in its canonical form (lower-case hex, as this code makes them). */
static int
uuid_bits(PyObject *text, uint64_t *hi, uint64_t *lo)
{
    if (!PyUnicode_Check(text) || !PyUnicode_IS_ASCII(text) || PyUnicode_GET_LENGTH(text) != 36) {
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

/* The seed and window of a topic: cached by the identity of its Topic (a changed topic is a new object). */
static TopicKeys *
topic_keys(KeyTable *self, PyObject *topic)
{
    TopicKeys *cached = &self->topics[((uintptr_t)topic >> 4) % TOPICS];
    if (cached->topic == topic) {
        return cached;
    }
    PyObject *name = PyObject_GetAttrString(topic, "qualified_name");
    if (name == NULL) {
        return NULL;
    }
    Py_ssize_t size;
    const char *utf8 = PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, &size) : NULL;
    if (utf8 == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "a topic's qualified_name is a str");
        }
        Py_DECREF(name);
        return NULL;
    }
    uint64_t seed = XXH3_64bits(utf8, (size_t)size);
    Py_DECREF(name);
    PyObject *window = PyObject_GetAttrString(topic, "idempotency_window");
    PyObject *seconds = window == NULL ? NULL : PyObject_GetAttrString(window, "seconds");
    Py_XDECREF(window);
    if (seconds == NULL) {
        return NULL;
    }
    long long value = PyLong_AsLongLong(seconds);
    Py_DECREF(seconds);
    if (value == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_INCREF(topic);
    Py_XSETREF(cached->topic, topic);
    cached->seed = seed;
    cached->window_ms = value > 0 ? (uint64_t)value * 1000 : 0;
    return cached;
}

/* A key's UTF-8, if it is one: 1 to MAX_KEY_LENGTH printable characters. NULL without an error when it is not. */
static const char *
key_bytes(PyObject *key, Py_ssize_t *size)
{
    if (!PyUnicode_Check(key)) {
        return NULL;
    }
    Py_ssize_t length = PyUnicode_GET_LENGTH(key);
    if (length < 1 || length > MAX_KEY_LENGTH) {
        return NULL;
    }
    if (PyUnicode_IS_ASCII(key)) {
        const unsigned char *chars = PyUnicode_DATA(key);
        for (Py_ssize_t i = 0; i < length; i++) {
            if (chars[i] < 0x20 || chars[i] > 0x7e) {
                return NULL;
            }
        }
        *size = length;
        return (const char *)chars;
    }
    for (Py_ssize_t i = 0; i < length; i++) {
        if (!Py_UNICODE_ISPRINTABLE(PyUnicode_READ_CHAR(key, i))) {
            return NULL;
        }
    }
    const char *utf8 = PyUnicode_AsUTF8AndSize(key, size);
    if (utf8 == NULL) { /* a lone surrogate: no key */
        PyErr_Clear();
    }
    return utf8;
}

static PyObject *
reject(KeyTable *self, PyObject *topic, PyObject *key, int reused)
{
    PyObject *error = PyObject_CallFunction(self->rejected, "OOO", topic, key, reused ? Py_True : Py_False);
    if (error != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(error), error);
        Py_DECREF(error);
    }
    return NULL;
}

static PyObject *
call_answer(PyObject *answer, PyObject *outcome)
{
    PyObject *args[] = {outcome};
    return PyObject_Vectorcall(answer, args, 1, NULL);
}

/* publish(produce, topic, message_id, body, headers, key, answer[, digest]): publishes the message with
 * produce(topic, message_id, body, headers, first) unless the key is known: then answer gets the first publish's
 * result (at once, or through wait() when its first is in flight here). Raises what rejected() makes of a key that
 * is no key and of a known key with another body. digest: the body's, for a body that is no bytes (spooled). */
static PyObject *
KeyTable_publish(KeyTable *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 && nargs != 8) {
        PyErr_Format(PyExc_TypeError, "publish() takes 7 or 8 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *produce = args[0], *topic = args[1], *message_id = args[2], *body = args[3], *key = args[5];
    PyObject *answer = args[6];
    Py_ssize_t key_size;
    const char *key_utf8 = key_bytes(key, &key_size);
    if (key_utf8 == NULL) {
        return PyErr_Occurred() ? NULL : reject(self, topic, key, 0);
    }
    if (nargs == 7 && !PyBytes_CheckExact(body)) { /* a large body is read in a thread */
        return PyObject_Vectorcall(self->spooled, args, 7, NULL);
    }
    TopicKeys *keyed = topic_keys(self, topic);
    if (keyed == NULL) {
        return NULL;
    }
    uint64_t hi, lo;
    split(XXH3_128bits_withSeed(key_utf8, (size_t)key_size, keyed->seed), &hi, &lo);
    __builtin_prefetch(&self->slots[lo & self->mask]); /* a miss of the cache, mostly: fetched meanwhile */
    uint64_t digest;
    if (nargs == 8) {
        digest = PyLong_AsUnsignedLongLong(args[7]);
        if (digest == (uint64_t)-1 && PyErr_Occurred()) {
            return NULL;
        }
    } else {
        digest = XXH3_64bits(PyBytes_AS_STRING(body), (size_t)PyBytes_GET_SIZE(body));
    }
    Slot *slot = find(self->slots, self->mask, hi, lo);
    if (!is_empty(slot) && is_live(slot, now_ms(0))) {
        if (slot->digest != digest) {
            return reject(self, topic, key, 1);
        }
        if (in_flight(slot)) {
            slot->until = WAITED;
            PyObject *named = named_to(hi, lo);
            PyObject *waiting = named == NULL ? NULL : PyObject_CallFunctionObjArgs(self->wait, named, answer, NULL);
            Py_XDECREF(named);
            return waiting;
        }
        PyObject *first_id = uuid_text(slot->id_hi, slot->id_lo);
        PyObject *result = first_id == NULL ? NULL
                                            : PyObject_CallFunctionObjArgs(self->result, first_id,
                                                                           (slot->until & 1) ? Py_True : Py_False,
                                                                           Py_True, NULL);
        Py_XDECREF(first_id);
        if (result == NULL) {
            return NULL;
        }
        PyObject *answered = call_answer(answer, result);
        Py_DECREF(result);
        return answered;
    }
    if (is_empty(slot) && (slot = take(self, hi, lo)) == NULL) {
        return NULL;
    }
    FirstPublish *first = PyObject_New(FirstPublish, &FirstPublishType);
    if (first == NULL) { /* the slot (new, or of a window over) emptied: no key in flight without its publish */
        delete_at(self, (size_t)(slot - self->slots));
        return NULL;
    }
    slot->digest = digest;
    slot->id_hi = slot->id_lo = 0;
    slot->until = IN_FLIGHT;
    Py_INCREF(self);
    first->table = self;
    Py_INCREF(answer);
    first->answer = answer;
    first->hi = hi;
    first->lo = lo;
    first->digest = digest;
    first->window_ms = keyed->window_ms;
    first->slot = slot;
    first->moves = self->moves;
    first->vectorcall = (vectorcallfunc)FirstPublish_vectorcall;
    PyObject *produce_args[] = {topic, message_id, body, args[4], (PyObject *)first};
    PyObject *produced = PyObject_Vectorcall(produce, produce_args, 5, NULL);
    if (produced == NULL && PyErr_ExceptionMatches(PyExc_Exception)) {
        /* whatever refuses the message answers it through first: its waiting repeats too */
        PyObject *type, *error, *traceback;
        PyErr_Fetch(&type, &error, &traceback);
        PyErr_NormalizeException(&type, &error, &traceback);
        if (traceback != NULL) {
            PyException_SetTraceback(error, traceback);
        }
        PyObject *outcome[] = {error};
        produced = PyObject_Vectorcall((PyObject *)first, outcome, 1, NULL);
        Py_XDECREF(type);
        Py_XDECREF(error);
        Py_XDECREF(traceback);
    }
    Py_DECREF(first);
    return produced;
}

static int
outbox_add(KeyTable *self, const Slot *slot)
{
    if (self->outbox_count == self->outbox_capacity) {
        size_t capacity = self->outbox_capacity ? 2 * self->outbox_capacity : 256;
        Slot *grown = PyMem_RawRealloc(self->outbox, capacity * sizeof(Slot));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->outbox = grown;
        self->outbox_capacity = capacity;
    }
    self->outbox[self->outbox_count++] = *slot;
    return 0;
}

/* A key's first publish is answered: kept when it was accepted (and written at the next flush), else forgotten;
 * repeats that came meanwhile get its answer through release() (an error too: they may try again). */
static PyObject *
FirstPublish_vectorcall(FirstPublish *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "a first publish is answered with its outcome alone");
        return NULL;
    }
    PyObject *outcome = args[0], *answer = self->answer;
    if (answer == NULL) { /* answered already */
        Py_RETURN_NONE;
    }
    self->answer = NULL;
    KeyTable *table = self->table;
    Slot *slot = self->moves == table->moves ? self->slot : find(table->slots, table->mask, self->hi, self->lo);
    int ours = !is_empty(slot) && in_flight(slot) && slot->digest == self->digest; /* not learnt meanwhile */
    int waited = ours && slot->until == WAITED;
    int failed = 0;
    uint64_t id_hi, id_lo;
    if (Py_IS_TYPE(outcome, (PyTypeObject *)table->result) && PyTuple_GET_SIZE(outcome) >= 2 &&
        uuid_bits(PyTuple_GET_ITEM(outcome, 0), &id_hi, &id_lo)) { /* no UUID (none of ours): not kept */
        uint64_t now = now_ms(1);
        Slot kept = {
            .hi = self->hi,
            .lo = self->lo,
            .digest = self->digest,
            .id_hi = id_hi,
            .id_lo = id_lo,
            .until = (now + self->window_ms) << 1 | (PyTuple_GET_ITEM(outcome, 1) == Py_True),
        };
        if (ours) {
            *slot = kept;
        } else {
            Slot *taken = take(table, self->hi, self->lo);
            if (taken == NULL) {
                failed = 1;
            } else {
                *taken = kept;
            }
        }
        if (!failed) {
            failed = outbox_add(table, &kept) < 0;
        }
        if (!failed && !table->flush_due) { /* asked again by the next answer if asking failed */
            PyObject *due = PyObject_CallNoArgs(table->kept);
            failed = due == NULL;
            table->flush_due = due != NULL;
            Py_XDECREF(due);
        }
    } else if (ours) {
        delete_at(table, (size_t)(slot - table->slots));
    }
    if (failed) { /* answered all the same: a key not kept is a duplicate at worst, never a loss */
        PyErr_WriteUnraisable((PyObject *)self);
    }
    if (waited) { /* the repeats waiting for this answer get it whatever happened to the key */
        PyObject *named = named_to(self->hi, self->lo);
        PyObject *released = named == NULL ? NULL : PyObject_CallFunctionObjArgs(table->release, named, outcome, NULL);
        Py_XDECREF(named);
        if (released == NULL) {
            PyErr_WriteUnraisable((PyObject *)self);
        }
        Py_XDECREF(released);
    }
    PyObject *answered = call_answer(answer, outcome);
    Py_DECREF(answer);
    return answered;
}

/* flush(): the records of the keys answered since the last flush (none: an empty list). */
static PyObject *
KeyTable_flush(KeyTable *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *records = PyList_New(0);
    if (records == NULL) {
        return NULL;
    }
    for (size_t start = 0; start < self->outbox_count; start += SLOTS_PER_RECORD) {
        size_t slots = self->outbox_count - start;
        if (slots > SLOTS_PER_RECORD) {
            slots = SLOTS_PER_RECORD;
        }
        PyObject *record = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(sizeof(MAGIC) + slots * sizeof(Slot)));
        if (record == NULL) {
            Py_DECREF(records);
            return NULL;
        }
        char *out = PyBytes_AS_STRING(record);
        memcpy(out, MAGIC, sizeof(MAGIC));
        uint64_t *words = (uint64_t *)(out + sizeof(MAGIC));
        for (size_t i = 0; i < slots; i++) {
            const Slot *slot = &self->outbox[start + i];
            uint64_t fields[6] = {slot->hi, slot->lo, slot->digest, slot->id_hi, slot->id_lo, slot->until};
            for (int f = 0; f < 6; f++) {
                uint64_t word = LITTLE(fields[f]);
                memcpy(&words[6 * i + (size_t)f], &word, sizeof(word));
            }
        }
        int appended = PyList_Append(records, record);
        Py_DECREF(record);
        if (appended < 0) {
            Py_DECREF(records);
            return NULL;
        }
    }
    /* Four slots looked at for each key kept: slots whose window is over are emptied as fast as keys come. Here, in
     * one stretch of memory, rather than a few slots for each answer (three lines missing from the cache each). */
    sweep(self, 4 * self->outbox_count, now_ms(0));
    self->outbox_count = 0;
    self->flush_due = 0;
    if (self->outbox_capacity > 65536) { /* a burst's outbox is not kept */
        PyMem_RawFree(self->outbox);
        self->outbox = NULL;
        self->outbox_capacity = 0;
    }
    return records;
}

static int
learn_slot(KeyTable *self, const Slot *learnt, uint64_t now)
{
    if ((learnt->hi == 0 && learnt->lo == 0) || learnt->until <= WAITED || (learnt->until >> 1) <= now ||
        (learnt->until >> 1) >= NEVER) {
        return 0;
    }
    Slot *slot = find(self->slots, self->mask, learnt->hi, learnt->lo);
    if (!is_empty(slot) && in_flight(slot)) { /* its first publish here writes it, and answers its waiting repeats */
        return 0;
    }
    if ((slot = take(self, learnt->hi, learnt->lo)) == NULL) {
        return -1;
    }
    *slot = *learnt;
    return 1;
}

/* learn(record): the keys of a record of this format (another frontend's, or this process's before a restart);
 * returns how many were kept (those whose window is over are not). ValueError: no record of this format. */
static PyObject *
KeyTable_learn(KeyTable *self, PyObject *record)
{
    if (!PyBytes_Check(record)) {
        PyErr_SetString(PyExc_TypeError, "a record is bytes");
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(record);
    const char *data = PyBytes_AS_STRING(record);
    if (size < (Py_ssize_t)sizeof(MAGIC) || memcmp(data, MAGIC, sizeof(MAGIC)) != 0 ||
        (size - (Py_ssize_t)sizeof(MAGIC)) % (Py_ssize_t)sizeof(Slot) != 0) {
        PyErr_SetString(PyExc_ValueError, "no record of keys of this format");
        return NULL;
    }
    size_t slots = (size_t)(size - (Py_ssize_t)sizeof(MAGIC)) / sizeof(Slot), kept = 0;
    const char *in = data + sizeof(MAGIC);
    uint64_t now = now_ms(0);
    for (size_t i = 0; i < slots; i++) {
        uint64_t fields[6];
        memcpy(fields, in + i * sizeof(Slot), sizeof(fields));
        Slot learnt = {LITTLE(fields[0]), LITTLE(fields[1]), LITTLE(fields[2]),
                       LITTLE(fields[3]), LITTLE(fields[4]), LITTLE(fields[5])};
        int learnt_now = learn_slot(self, &learnt, now);
        if (learnt_now < 0) {
            return NULL;
        }
        kept += (size_t)learnt_now;
    }
    sweep(self, 4 * slots, now);
    return PyLong_FromSize_t(kept);
}

/* record(keys): a record of this format from (named, digest, message_id, acknowledged, until) of each key (the
 * records of the versions before, read in Python); keys whose message id is no UUID of this code's are left out. */
static PyObject *
KeyTable_record(PyObject *Py_UNUSED(type), PyObject *keys)
{
    PyObject *sequence = PySequence_Fast(keys, "the keys are a sequence");
    if (sequence == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence), used = 0;
    PyObject *record = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(MAGIC) + n * (Py_ssize_t)sizeof(Slot));
    if (record == NULL) {
        Py_DECREF(sequence);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(record);
    memcpy(out, MAGIC, sizeof(MAGIC));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PySequence_Fast_GET_ITEM(sequence, i);
        PyObject *named, *digest, *message_id, *acknowledged, *until;
        if (!PyTuple_Check(key) ||
            !PyArg_ParseTuple(key, "OO!OO!O!", &named, &PyLong_Type, &digest, &message_id, &PyBool_Type,
                              &acknowledged, &PyLong_Type, &until)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "a key is (named, digest, message_id, acknowledged, until)");
            }
            goto error;
        }
        Slot slot;
        if (named_from(named, &slot.hi, &slot.lo) < 0) {
            goto error;
        }
        slot.digest = PyLong_AsUnsignedLongLong(digest);
        uint64_t ms = PyLong_AsUnsignedLongLong(until);
        if (PyErr_Occurred()) {
            goto error;
        }
        if (!uuid_bits(message_id, &slot.id_hi, &slot.id_lo) || ms >= NEVER) {
            continue;
        }
        slot.until = ms << 1 | (acknowledged == Py_True);
        uint64_t fields[6] = {slot.hi, slot.lo, slot.digest, slot.id_hi, slot.id_lo, slot.until};
        for (int f = 0; f < 6; f++) {
            uint64_t word = LITTLE(fields[f]);
            memcpy(out + sizeof(MAGIC) + (size_t)used * sizeof(Slot) + (size_t)f * 8, &word, 8);
        }
        used++;
    }
    Py_DECREF(sequence);
    if (_PyBytes_Resize(&record, (Py_ssize_t)sizeof(MAGIC) + used * (Py_ssize_t)sizeof(Slot)) < 0) {
        return NULL;
    }
    return record;
error:
    Py_DECREF(sequence);
    Py_DECREF(record);
    return NULL;
}

/* find(named): (digest, message_id, acknowledged, until) of a key's first publish within its window, None when it
 * is unknown, (digest, None, False, 0) while it is in flight. */
static PyObject *
KeyTable_find(KeyTable *self, PyObject *named)
{
    uint64_t hi, lo;
    if (named_from(named, &hi, &lo) < 0) {
        return NULL;
    }
    Slot *slot = find(self->slots, self->mask, hi, lo);
    if (is_empty(slot) || !is_live(slot, now_ms(0))) {
        Py_RETURN_NONE;
    }
    if (in_flight(slot)) {
        return Py_BuildValue("(KOOi)", (unsigned long long)slot->digest, Py_None, Py_False, 0);
    }
    PyObject *message_id = uuid_text(slot->id_hi, slot->id_lo);
    if (message_id == NULL) {
        return NULL;
    }
    return Py_BuildValue("(KNOK)", (unsigned long long)slot->digest, message_id, (slot->until & 1) ? Py_True : Py_False,
                         (unsigned long long)(slot->until >> 1));
}

/* sweep(slots): looks at that many more slots and empties those whose window is over. */
static PyObject *
KeyTable_sweep(KeyTable *self, PyObject *steps)
{
    Py_ssize_t budget = PyLong_AsSsize_t(steps);
    if (budget == -1 && PyErr_Occurred()) {
        return NULL;
    }
    sweep(self, budget < 0 ? 0 : (size_t)budget, now_ms(0));
    Py_RETURN_NONE;
}

static Py_ssize_t
KeyTable_length(KeyTable *self)
{
    return (Py_ssize_t)self->count;
}

static PyObject *
KeyTable_capacity(KeyTable *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t(self->mask + 1);
}

static PyObject *
KeyTable_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"result", "rejected", "wait", "release", "spooled", "kept", NULL};
    PyObject *hooks[6];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOO:KeyTable", names, &hooks[0], &hooks[1], &hooks[2],
                                     &hooks[3], &hooks[4], &hooks[5])) {
        return NULL;
    }
    if (!PyType_Check(hooks[0])) {
        PyErr_SetString(PyExc_TypeError, "result is the type of a publish's result");
        return NULL;
    }
    KeyTable *self = (KeyTable *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->slots = PyMem_RawCalloc(INITIAL_CAPACITY, sizeof(Slot));
    if (self->slots == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->mask = INITIAL_CAPACITY - 1;
    PyObject **fields[] = {&self->result, &self->rejected, &self->wait, &self->release, &self->spooled, &self->kept};
    for (int i = 0; i < 6; i++) {
        *fields[i] = Py_NewRef(hooks[i]);
    }
    return (PyObject *)self;
}

static int
KeyTable_traverse(KeyTable *self, visitproc visit, void *arg)
{
    Py_VISIT(self->result);
    Py_VISIT(self->rejected);
    Py_VISIT(self->wait);
    Py_VISIT(self->release);
    Py_VISIT(self->spooled);
    Py_VISIT(self->kept);
    for (int i = 0; i < TOPICS; i++) {
        Py_VISIT(self->topics[i].topic);
    }
    return 0;
}

static int
KeyTable_clear(KeyTable *self)
{
    Py_CLEAR(self->result);
    Py_CLEAR(self->rejected);
    Py_CLEAR(self->wait);
    Py_CLEAR(self->release);
    Py_CLEAR(self->spooled);
    Py_CLEAR(self->kept);
    for (int i = 0; i < TOPICS; i++) {
        Py_CLEAR(self->topics[i].topic);
    }
    return 0;
}

static void
KeyTable_dealloc(KeyTable *self)
{
    PyObject_GC_UnTrack(self);
    KeyTable_clear(self);
    PyMem_RawFree(self->slots);
    PyMem_RawFree(self->outbox);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Not tracked by the collector (one per keyed publish, short-lived): it holds the publish's answer until it is
 * called, and lets go of it then, so it is in no cycle for long. */
static void
FirstPublish_dealloc(FirstPublish *self)
{
    Py_XDECREF(self->answer);
    Py_DECREF(self->table);
    PyObject_Free(self);
}

static PyMethodDef KeyTable_methods[] = {
    {"publish", (PyCFunction)(void (*)(void))KeyTable_publish, METH_FASTCALL, NULL},
    {"flush", (PyCFunction)KeyTable_flush, METH_NOARGS, NULL},
    {"learn", (PyCFunction)KeyTable_learn, METH_O, NULL},
    {"record", (PyCFunction)KeyTable_record, METH_O | METH_STATIC, NULL},
    {"find", (PyCFunction)KeyTable_find, METH_O, NULL},
    {"sweep", (PyCFunction)KeyTable_sweep, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef KeyTable_getset[] = {
    {"capacity", (getter)KeyTable_capacity, NULL, "slots in the table", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods KeyTable_sequence = {
    .sq_length = (lenfunc)KeyTable_length,
};

static PyTypeObject KeyTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hermes.frontend.key_table.KeyTable",
    .tp_doc = "The idempotency keys of this frontend process in one flat table, and the publish path's check.",
    .tp_basicsize = sizeof(KeyTable),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = KeyTable_new,
    .tp_dealloc = (destructor)KeyTable_dealloc,
    .tp_traverse = (traverseproc)KeyTable_traverse,
    .tp_clear = (inquiry)KeyTable_clear,
    .tp_methods = KeyTable_methods,
    .tp_getset = KeyTable_getset,
    .tp_as_sequence = &KeyTable_sequence,
};

static PyTypeObject FirstPublishType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hermes.frontend.key_table.FirstPublish",
    .tp_doc = "The answer of a key's first publish: keeps the key, then answers the publish.",
    .tp_basicsize = sizeof(FirstPublish),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(FirstPublish, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = (destructor)FirstPublish_dealloc,
};

static struct PyModuleDef key_table_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hermes.frontend.key_table",
    .m_doc = "The idempotency keys of a frontend process in one flat table (hermes.frontend.idempotency).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit_key_table(void)
{
    if (PyType_Ready(&KeyTableType) < 0 || PyType_Ready(&FirstPublishType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&key_table_module);
    if (module == NULL) {
        return NULL;
    }
    PyObject *magic = PyBytes_FromStringAndSize(MAGIC, sizeof(MAGIC));
    if (magic == NULL || PyModule_AddObjectRef(module, "KeyTable", (PyObject *)&KeyTableType) < 0 ||
        PyModule_AddIntConstant(module, "MAX_KEY_LENGTH", MAX_KEY_LENGTH) < 0 ||
        PyModule_AddObjectRef(module, "RECORD_MAGIC", magic) < 0) {
        Py_XDECREF(magic);
        Py_DECREF(module);
        return NULL;
    }
    Py_DECREF(magic);
    return module;
}

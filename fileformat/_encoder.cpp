// A writer's batches encoded on a thread of their own that never holds the GIL.
//
// `Encoder(codec)` takes record batches through the Arrow C data interface
// (`batch.__arrow_c_array__()`) and encodes each as the batch message of an Arrow IPC
// stream in `codec`, with the options pyarrow's stream writer had in `ipc._StreamEncoder`
// (the codec's default level, no Arrow threads) and one stream writer kept for all
// batches. `encode` does it on the calling thread with the GIL released; `submit` queues
// it for the encoder's own thread (started at the first) and returns an `Encoding`,
// whose `result()` waits for the payload with the GIL released. Both give the same bytes
// for the same batch: a batch comes through the C interface either way (its imported
// buffers end where its rows do, which decides how Arrow writes a slice).
//
// A Python thread encoding for the writer held the GIL for every step around Arrow's
// compression (the call, each write of the message to a Python file object, the join),
// so a job's thread and it took turns at the GIL: small batches (a shared block's 256
// KiB) encoded there made a job slower, not faster (bench/README.md). This thread runs
// only C++ and never takes the GIL: a batch whose buffers Python owns (a view of a mapped
// file) is let go only by a caller holding it (the thread leaves each batch it encoded
// in `Shared::spent`, which the Python-facing calls empty), and no C++ exception leaves
// this file (each becomes an error status or a Python exception).
//
// zstd keeps one compression context per stream writer (`KeptZstdCodec`) where the build
// found libzstd (setup.py defines COMPACTOR_KEPT_ZSTD); Arrow's own codec makes one for
// every buffer it compresses.
//
// Built against the Arrow C++ library pyarrow ships (setup.py), as pyarrow's own
// documentation describes for extensions.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arrow/c/abi.h>
#include <arrow/c/bridge.h>
#include <arrow/io/interfaces.h>
#include <arrow/ipc/writer.h>
#include <arrow/record_batch.h>
#include <arrow/type.h>
#include <arrow/util/compression.h>
#ifdef COMPACTOR_KEPT_ZSTD
#include <zstd.h>
#endif

#include <pthread.h>
#include <sched.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

// An output stream that keeps what is written until it is taken.
class Capture : public arrow::io::OutputStream {
 public:
  arrow::Status Close() override {
    closed_ = true;
    return arrow::Status::OK();
  }
  bool closed() const override { return closed_; }
  arrow::Result<int64_t> Tell() const override { return position_; }
  arrow::Status Write(const void* data, int64_t nbytes) override {
    try {
      bytes_.append(static_cast<const char*>(data), static_cast<size_t>(nbytes));
    } catch (const std::exception& exc) {
      return arrow::Status::OutOfMemory("cannot hold the encoded batch: ", exc.what());
    }
    position_ += nbytes;
    return arrow::Status::OK();
  }
  std::string Take() {
    std::string out;
    out.swap(bytes_);
    return out;
  }

 private:
  std::string bytes_;
  int64_t position_ = 0;
  bool closed_ = false;
};

#ifdef COMPACTOR_KEPT_ZSTD
// Arrow's zstd codec with one compression context kept for all its buffers. Arrow's makes
// a context for every buffer it compresses (a batch has a dozen), and making one costs
// more than compressing a small buffer: the context's tables allocated and cleared, and
// zstd's CPU feature test, a trap to the hypervisor on a virtual machine
// (`ZSTD_createCCtx_advanced` was 2.6-3% of a job's CPU at bench-100p, perf).
// `ZSTD_compressCCtx` at Arrow's level writes the frame Arrow's one-shot call writes;
// everything else is Arrow's codec.
//
// Invariant: one thread at a time compresses with it. Each `StreamEncoder` owns its codec
// and its IPC writer has no threads of its own (`use_threads = false`).
class KeptZstdCodec final : public arrow::util::Codec {
  using Context = std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)>;

 public:
  static arrow::Result<std::unique_ptr<arrow::util::Codec>> Make() {
    ARROW_ASSIGN_OR_RAISE(auto arrow_codec, arrow::util::Codec::Create(arrow::Compression::ZSTD));
    Context context(ZSTD_createCCtx(), &ZSTD_freeCCtx);
    if (context == nullptr) return arrow::Status::OutOfMemory("cannot make a zstd context");
    return std::unique_ptr<arrow::util::Codec>(
        new KeptZstdCodec(std::move(arrow_codec), std::move(context)));
  }

  arrow::Result<int64_t> Compress(int64_t input_len, const uint8_t* input,
                                  int64_t output_buffer_len, uint8_t* output_buffer) override {
    size_t written = ZSTD_compressCCtx(context_.get(), output_buffer,
                                       static_cast<size_t>(output_buffer_len), input,
                                       static_cast<size_t>(input_len), level_);
    if (ZSTD_isError(written)) {
      return arrow::Status::IOError("ZSTD compression failed: ", ZSTD_getErrorName(written));
    }
    return static_cast<int64_t>(written);
  }
  arrow::Result<int64_t> Decompress(int64_t input_len, const uint8_t* input,
                                    int64_t output_buffer_len, uint8_t* output_buffer) override {
    return arrow_->Decompress(input_len, input, output_buffer_len, output_buffer);
  }
  int64_t MaxCompressedLen(int64_t input_len, const uint8_t* input) override {
    return arrow_->MaxCompressedLen(input_len, input);
  }
  arrow::Result<std::shared_ptr<arrow::util::Compressor>> MakeCompressor() override {
    return arrow_->MakeCompressor();
  }
  arrow::Result<std::shared_ptr<arrow::util::Decompressor>> MakeDecompressor() override {
    return arrow_->MakeDecompressor();
  }
  arrow::Compression::type compression_type() const override { return arrow::Compression::ZSTD; }
  int compression_level() const override { return level_; }
  int minimum_compression_level() const override { return arrow_->minimum_compression_level(); }
  int maximum_compression_level() const override { return arrow_->maximum_compression_level(); }
  int default_compression_level() const override { return arrow_->default_compression_level(); }

 private:
  KeptZstdCodec(std::unique_ptr<arrow::util::Codec> arrow_codec, Context context)
      : arrow_(std::move(arrow_codec)),
        context_(std::move(context)),
        level_(arrow_->compression_level()) {
    if (level_ == arrow::util::kUseDefaultCompressionLevel) {
      level_ = arrow_->default_compression_level();
    }
  }

  std::unique_ptr<arrow::util::Codec> arrow_;
  Context context_;
  int level_;
};
#endif

// The codec a stream writer compresses with.
arrow::Result<std::unique_ptr<arrow::util::Codec>> MakeCodec(arrow::Compression::type codec) {
#ifdef COMPACTOR_KEPT_ZSTD
  if (codec == arrow::Compression::ZSTD) return KeptZstdCodec::Make();
#endif
  return arrow::util::Codec::Create(codec);
}

struct Job {
  std::shared_ptr<arrow::RecordBatch> batch;
  std::string payload;
  arrow::Status status;
  bool done = false;
};

// What the Python objects and the thread share; the thread holds it too, so it outlives
// whichever goes first.
struct Shared {
  explicit Shared(arrow::Compression::type codec) : codec(codec) {}
  arrow::Compression::type codec;
  std::mutex mu;
  std::condition_variable work, finished;
  std::deque<std::shared_ptr<Job>> queue;
  // Batches the thread has encoded, let go by a call that holds the GIL (`spend`).
  std::vector<std::shared_ptr<arrow::RecordBatch>> spent;
  bool stop = false;
};

// Lets go of the batches the thread has encoded; the caller holds the GIL, which the
// last reference to a buffer Python owns needs.
void spend(Shared& shared) {
  std::vector<std::shared_ptr<arrow::RecordBatch>> spent;
  {
    std::lock_guard<std::mutex> lock(shared.mu);
    spent.swap(shared.spent);
  }
}

// One stream writer for the batches of one schema; the schema's message, written before
// the first batch, is dropped (sections carry batch messages only).
class StreamEncoder {
 public:
  explicit StreamEncoder(arrow::Compression::type codec) : codec_(codec) {}

  // `batch`'s message into `out`; any C++ exception on the way is an error status.
  arrow::Status Encode(const arrow::RecordBatch& batch, std::string* out) {
    try {
      return EncodeOrThrow(batch, out);
    } catch (const std::exception& exc) {
      return arrow::Status::UnknownError("encoding failed: ", exc.what());
    }
  }

 private:
  arrow::Status EncodeOrThrow(const arrow::RecordBatch& batch, std::string* out) {
    if (writer_ == nullptr || !schema_->Equals(*batch.schema(), /*check_metadata=*/true)) {
      ARROW_RETURN_NOT_OK(Open(batch.schema()));
    }
    ARROW_RETURN_NOT_OK(writer_->WriteRecordBatch(batch));
    *out = capture_->Take();
    return arrow::Status::OK();
  }

  arrow::Status Open(const std::shared_ptr<arrow::Schema>& schema) {
    auto options = arrow::ipc::IpcWriteOptions::Defaults();
    options.use_threads = false;
    if (codec_ != arrow::Compression::UNCOMPRESSED) {
      ARROW_ASSIGN_OR_RAISE(options.codec, MakeCodec(codec_));
    }
    capture_ = std::make_shared<Capture>();
    ARROW_ASSIGN_OR_RAISE(writer_, arrow::ipc::MakeStreamWriter(capture_, schema, options));
    ARROW_ASSIGN_OR_RAISE(auto empty, arrow::RecordBatch::MakeEmpty(schema));
    ARROW_RETURN_NOT_OK(writer_->WriteRecordBatch(*empty));
    capture_->Take();
    schema_ = schema;
    return arrow::Status::OK();
  }

  arrow::Compression::type codec_;
  std::shared_ptr<Capture> capture_;
  std::shared_ptr<arrow::ipc::RecordBatchWriter> writer_;
  std::shared_ptr<arrow::Schema> schema_;
};

constexpr const char* kThreadName = "encode-batches";

void run(std::shared_ptr<Shared> shared) {
  pthread_setname_np(pthread_self(), kThreadName);
  // SCHED_BATCH: the job's thread wakes this one for every batch it submits, and on two
  // cores busy with the job's thread and phase 1's helper the woken encoder would
  // otherwise preempt the thread that woke it (bench/README.md, "The encoder's thread
  // under SCHED_BATCH"). Only a hint: where the policy cannot be set, nothing changes.
  sched_param batch_param{};
  batch_param.sched_priority = 0;
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &batch_param);
  StreamEncoder encoder(shared->codec);
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(shared->mu);
      shared->work.wait(lock, [&] { return shared->stop || !shared->queue.empty(); });
      if (shared->stop) return;  // what is queued is dropped (stop)
      job = shared->queue.front();
      shared->queue.pop_front();
    }
    std::string payload;
    arrow::Status status = encoder.Encode(*job->batch, &payload);
    {
      std::lock_guard<std::mutex> lock(shared->mu);
      job->payload.swap(payload);
      job->status = status;
      job->done = true;
      try {
        shared->spent.push_back(std::move(job->batch));
      } catch (...) {
        // (no room to move it: it stays with the job, let go by whoever holds it last)
      }
    }
    shared->finished.notify_all();
  }
}

// ---- Encoding: one batch's payload to come ----

typedef struct {
  PyObject_HEAD
  std::shared_ptr<Shared>* shared;
  std::shared_ptr<Job>* job;
} EncodingObject;

static void Encoding_dealloc(EncodingObject* self) {
  delete self->job;  // a batch not yet encoded, if this is its last reference, goes here
  if (self->shared != nullptr) spend(**self->shared);
  delete self->shared;
  Py_TYPE(self)->tp_free(reinterpret_cast<PyObject*>(self));
}

static PyObject* Encoding_done(EncodingObject* self, PyObject*) {
  std::lock_guard<std::mutex> lock((*self->shared)->mu);
  return PyBool_FromLong((*self->job)->done);
}

static PyObject* Encoding_result(EncodingObject* self, PyObject*) {
  Shared& shared = **self->shared;
  Job& job = **self->job;
  arrow::Status status;
  Py_BEGIN_ALLOW_THREADS {
    // `stop` marks every job it drops done (cancelled); the one being encoded finishes.
    std::unique_lock<std::mutex> lock(shared.mu);
    shared.finished.wait(lock, [&] { return job.done; });
    status = job.status;
  }
  Py_END_ALLOW_THREADS;
  spend(shared);
  job.batch.reset();
  if (status.IsCancelled()) {
    PyErr_SetString(PyExc_RuntimeError, "the encoding thread was closed first");
    return nullptr;
  }
  if (!status.ok()) {
    PyErr_Format(PyExc_RuntimeError, "Arrow cannot encode the batch: %s",
                 status.ToString().c_str());
    return nullptr;
  }
  return PyBytes_FromStringAndSize(job.payload.data(),
                                   static_cast<Py_ssize_t>(job.payload.size()));
}

static PyMethodDef Encoding_methods[] = {
    {"done", reinterpret_cast<PyCFunction>(Encoding_done), METH_NOARGS,
     "done()\n\nWhether the payload is ready (or the encoding failed)."},
    {"result", reinterpret_cast<PyCFunction>(Encoding_result), METH_NOARGS,
     "result()\n\nThe payload, waiting for it with the GIL released; RuntimeError if Arrow\n"
     "could not encode the batch or the thread was closed first."},
    {nullptr, nullptr, 0, nullptr},
};

static PyTypeObject EncodingType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ---- Encoder ----

typedef struct {
  PyObject_HEAD
  std::shared_ptr<Shared>* shared;
  std::thread* thread;
  StreamEncoder* here;  // the calling threads' (encode), one at a time (here_mu)
  std::mutex* here_mu;
  int closed;
} EncoderObject;

static void stop(EncoderObject* self) {
  std::thread* thread = self->thread;
  if (thread == nullptr) return;
  self->thread = nullptr;  // a second close() meanwhile finds nothing to join
  Shared& shared = **self->shared;
  std::deque<std::shared_ptr<Job>> dropped;
  {
    std::lock_guard<std::mutex> lock(shared.mu);
    shared.stop = true;
    dropped.swap(shared.queue);
    for (auto& job : dropped) {
      job->status = arrow::Status::Cancelled("the encoding thread was closed first");
      job->done = true;
    }
  }
  shared.work.notify_all();
  shared.finished.notify_all();
  Py_BEGIN_ALLOW_THREADS thread->join();
  Py_END_ALLOW_THREADS;
  delete thread;
  spend(shared);
}  // the jobs never encoded go here, with the GIL held

static int Encoder_init(EncoderObject* self, PyObject* args, PyObject* kwds) {
  static const char* kwlist[] = {"codec", nullptr};
  const char* name;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "s", const_cast<char**>(kwlist), &name))
    return -1;
  arrow::Compression::type codec;
  if (std::string(name) == "zstd") {
    codec = arrow::Compression::ZSTD;
  } else if (std::string(name) == "lz4") {
    codec = arrow::Compression::LZ4_FRAME;
  } else if (std::string(name) == "none") {
    codec = arrow::Compression::UNCOMPRESSED;
  } else {
    PyErr_Format(PyExc_ValueError, "codec must be 'zstd', 'lz4' or 'none', not '%s'", name);
    return -1;
  }
  if (self->shared != nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "already initialized");
    return -1;
  }
  try {
    self->shared = new std::shared_ptr<Shared>(std::make_shared<Shared>(codec));
    self->here = new StreamEncoder(codec);
    self->here_mu = new std::mutex();
  } catch (const std::exception&) {
    PyErr_NoMemory();
    return -1;
  }
  return 0;
}

static void Encoder_dealloc(EncoderObject* self) {
  stop(self);
  delete self->shared;
  delete self->here;
  delete self->here_mu;
  Py_TYPE(self)->tp_free(reinterpret_cast<PyObject*>(self));
}

// The record batch `capsules` (schema, array) hold, moved out of them; nullptr with an
// exception set if they hold none.
static std::shared_ptr<arrow::RecordBatch> imported(PyObject* capsules) {
  PyObject *schema_capsule, *array_capsule;
  if (!PyTuple_Check(capsules)) {
    PyErr_Format(PyExc_TypeError, "expected batch.__arrow_c_array__(), not %s",
                 Py_TYPE(capsules)->tp_name);
    return nullptr;
  }
  if (!PyArg_ParseTuple(capsules, "OO:batch", &schema_capsule, &array_capsule)) return nullptr;
  auto* schema = static_cast<struct ArrowSchema*>(
      PyCapsule_GetPointer(schema_capsule, "arrow_schema"));
  if (schema == nullptr) return nullptr;
  auto* array = static_cast<struct ArrowArray*>(PyCapsule_GetPointer(array_capsule, "arrow_array"));
  if (array == nullptr) return nullptr;
  if (schema->release == nullptr || array->release == nullptr) {
    PyErr_SetString(PyExc_ValueError, "the batch was already taken");
    return nullptr;
  }
  auto batch = arrow::ImportRecordBatch(array, schema);  // moves both out
  if (!batch.ok()) {
    PyErr_Format(PyExc_ValueError, "not a record batch: %s", batch.status().ToString().c_str());
    return nullptr;
  }
  return *std::move(batch);
}

static PyObject* Encoder_encode(EncoderObject* self, PyObject* capsules) {
  if (self->here == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "the encoder is not initialized");
    return nullptr;
  }
  std::shared_ptr<arrow::RecordBatch> batch = imported(capsules);
  if (batch == nullptr) return nullptr;
  std::string payload;
  arrow::Status status;
  Py_BEGIN_ALLOW_THREADS {
    std::lock_guard<std::mutex> lock(*self->here_mu);
    status = self->here->Encode(*batch, &payload);
  }
  Py_END_ALLOW_THREADS;
  if (!status.ok()) {
    PyErr_Format(PyExc_RuntimeError, "Arrow cannot encode the batch: %s",
                 status.ToString().c_str());
    return nullptr;
  }
  return PyBytes_FromStringAndSize(payload.data(), static_cast<Py_ssize_t>(payload.size()));
}

static PyObject* Encoder_submit(EncoderObject* self, PyObject* capsules) {
  if (self->shared == nullptr || self->closed) {
    PyErr_SetString(PyExc_RuntimeError, "the encoder is closed");
    return nullptr;
  }
  if (self->thread == nullptr) {
    try {
      self->thread = new std::thread(run, *self->shared);
      // Named here too, so it is listed under its name once submit returns, however late
      // the scheduler first runs it (run() names itself as well).
      pthread_setname_np(self->thread->native_handle(), kThreadName);
    } catch (const std::exception& exc) {
      PyErr_Format(PyExc_RuntimeError, "cannot start the encoding thread: %s", exc.what());
      return nullptr;
    }
  }
  spend(**self->shared);
  std::shared_ptr<arrow::RecordBatch> batch = imported(capsules);
  if (batch == nullptr) return nullptr;
  auto* out = PyObject_New(EncodingObject, &EncodingType);
  if (out == nullptr) return nullptr;
  out->shared = nullptr;
  out->job = nullptr;
  try {
    auto job = std::make_shared<Job>();
    job->batch = std::move(batch);
    out->shared = new std::shared_ptr<Shared>(*self->shared);
    out->job = new std::shared_ptr<Job>(job);
    std::lock_guard<std::mutex> lock((*self->shared)->mu);
    (*self->shared)->queue.push_back(job);
  } catch (const std::exception&) {
    Py_DECREF(out);
    PyErr_NoMemory();
    return nullptr;
  }
  (*self->shared)->work.notify_one();
  return reinterpret_cast<PyObject*>(out);
}

static PyObject* Encoder_close(EncoderObject* self, PyObject*) {
  self->closed = 1;
  stop(self);
  Py_RETURN_NONE;
}

static PyMethodDef Encoder_methods[] = {
    {"encode", reinterpret_cast<PyCFunction>(Encoder_encode), METH_O,
     "encode(capsules)\n\nThe payload of a record batch given as `batch.__arrow_c_array__()`\n"
     "(taken), encoded on this thread with the GIL released."},
    {"submit", reinterpret_cast<PyCFunction>(Encoder_submit), METH_O,
     "submit(capsules)\n\nQueues a record batch given as `batch.__arrow_c_array__()` (taken) for\n"
     "the encoder's thread; returns its Encoding."},
    {"close", reinterpret_cast<PyCFunction>(Encoder_close), METH_NOARGS,
     "close()\n\nStops the thread once the batch it is encoding is done; batches still\n"
     "queued are dropped (their result() raises RuntimeError). Idempotent; encode still\n"
     "works, submit raises RuntimeError."},
    {nullptr, nullptr, 0, nullptr},
};

static PyTypeObject EncoderType = {PyVarObject_HEAD_INIT(nullptr, 0)};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_encoder",
    "A writer's batches encoded as Arrow IPC messages on a thread that never holds the GIL.",
    -1, nullptr, nullptr, nullptr, nullptr, nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__encoder(void) {
  EncodingType.tp_name = "_encoder.Encoding";
  EncodingType.tp_basicsize = sizeof(EncodingObject);
  EncodingType.tp_dealloc = reinterpret_cast<destructor>(Encoding_dealloc);
  EncodingType.tp_flags = Py_TPFLAGS_DEFAULT;
  EncodingType.tp_doc = "One batch's payload, being encoded (Encoder.submit).";
  EncodingType.tp_methods = Encoding_methods;
  EncoderType.tp_name = "_encoder.Encoder";
  EncoderType.tp_basicsize = sizeof(EncoderObject);
  EncoderType.tp_dealloc = reinterpret_cast<destructor>(Encoder_dealloc);
  EncoderType.tp_flags = Py_TPFLAGS_DEFAULT;
  EncoderType.tp_doc =
      "Encoder(codec)\n\nRecord batches encoded as Arrow IPC batch messages in `codec` ('zstd',\n"
      "'lz4' or 'none'): on the calling thread, or in order on a thread of its own (named\n"
      "`encode-batches`), without the GIL.";
  EncoderType.tp_methods = Encoder_methods;
  EncoderType.tp_init = reinterpret_cast<initproc>(Encoder_init);
  EncoderType.tp_new = PyType_GenericNew;
  if (PyType_Ready(&EncodingType) < 0 || PyType_Ready(&EncoderType) < 0) return nullptr;
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) return nullptr;
  Py_INCREF(&EncoderType);
  if (PyModule_AddObject(m, "Encoder", reinterpret_cast<PyObject*>(&EncoderType)) < 0) {
    Py_DECREF(&EncoderType);
    Py_DECREF(m);
    return nullptr;
  }
#ifdef COMPACTOR_KEPT_ZSTD
  const int kept_zstd = 1;
#else
  const int kept_zstd = 0;
#endif
  // Whether zstd keeps one context per stream writer (the build found libzstd).
  if (PyModule_AddObjectRef(m, "KEPT_ZSTD_CONTEXT", kept_zstd ? Py_True : Py_False) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}

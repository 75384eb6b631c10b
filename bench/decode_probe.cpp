// A probe, not part of compactor: what phase 2's decode of one batch message costs when
// Arrow C++ does it in one call and hands Python the batch through the C data interface
// (bench/decode_probe.py builds and times it).
//
// `schema(capsule)` keeps the record schema (an `__arrow_c_schema__` capsule).
// `decode(payload)` reads the payload as one IPC record batch message of that schema
// (`arrow::ipc::ReadRecordBatch`, Arrow's threads off, as `fileformat.ipc` reads), runs
// `ValidateFull`, exports the batch and returns the address of its `ArrowArray`, which
// Python imports with the schema it already holds (`RecordBatch._import_from_c`), so no
// schema is exported or imported a batch. A buffer stored uncompressed in the message is
// a view of the payload, which the batch does not hold: the caller keeps the payload for
// as long as the batch. `release(address)` frees an address that was
// not imported. Errors are ValueError with Arrow's words.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arrow/buffer.h>
#include <arrow/c/abi.h>
#include <arrow/c/bridge.h>
#include <arrow/io/memory.h>
#include <arrow/ipc/message.h>
#include <arrow/ipc/reader.h>
#include <arrow/record_batch.h>
#include <arrow/type.h>

#include <memory>

namespace {

std::shared_ptr<arrow::Schema> kept_schema;

PyObject* failed(const arrow::Status& status) {
  PyErr_SetString(PyExc_ValueError, status.ToString().c_str());
  return nullptr;
}

PyObject* schema(PyObject*, PyObject* capsule) {
  auto* c = static_cast<ArrowSchema*>(PyCapsule_GetPointer(capsule, "arrow_schema"));
  if (c == nullptr) return nullptr;
  auto imported = arrow::ImportSchema(c);
  if (!imported.ok()) return failed(imported.status());
  kept_schema = *imported;
  Py_RETURN_NONE;
}

arrow::Result<std::shared_ptr<arrow::RecordBatch>> read(const uint8_t* data, int64_t size) {
  auto buffer = std::make_shared<arrow::Buffer>(data, size);
  arrow::io::BufferReader source(buffer);
  ARROW_ASSIGN_OR_RAISE(auto message, arrow::ipc::ReadMessage(&source));
  if (message == nullptr) return arrow::Status::Invalid("no message");
  auto options = arrow::ipc::IpcReadOptions::Defaults();
  options.use_threads = false;
  ARROW_ASSIGN_OR_RAISE(auto batch,
                        arrow::ipc::ReadRecordBatch(*message, kept_schema, nullptr, options));
  ARROW_RETURN_NOT_OK(batch->ValidateFull());
  return batch;
}

PyObject* decode(PyObject*, PyObject* payload) {
  if (kept_schema == nullptr) {
    PyErr_SetString(PyExc_ValueError, "no schema: call schema() first");
    return nullptr;
  }
  Py_buffer view;
  if (PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE) < 0) return nullptr;
  auto batch = read(static_cast<const uint8_t*>(view.buf), view.len);
  PyBuffer_Release(&view);  // the batch's buffers point into it: the caller keeps it
  if (!batch.ok()) return failed(batch.status());
  auto* exported = new ArrowArray;
  auto status = arrow::ExportRecordBatch(**batch, exported, nullptr);
  if (!status.ok()) {
    delete exported;
    return failed(status);
  }
  return PyLong_FromVoidPtr(exported);
}

PyObject* release(PyObject*, PyObject* address) {
  auto* exported = static_cast<ArrowArray*>(PyLong_AsVoidPtr(address));
  if (exported == nullptr) return nullptr;
  if (exported->release != nullptr) exported->release(exported);
  delete exported;
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"schema", schema, METH_O, "Keeps the record schema (an arrow_schema capsule)."},
    {"decode", decode, METH_O, "A batch message decoded: its exported ArrowArray's address."},
    {"release", release, METH_O, "Frees an exported ArrowArray that was not imported."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "decode_probe", nullptr, -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_decode_probe(void) { return PyModule_Create(&module); }

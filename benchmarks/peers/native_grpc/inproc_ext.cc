// _fwx_native_grpc: a libgrpc++ server inside the Python process, for measuring only.
//
// The "native gRPC server in fwx's process" design of the README's "gRPC at
// REST's price": gRPC's own threads terminate HTTP/2 and read each ModelInfer
// message; the raw bytes wait in a queue; the event loop is woken through one
// eventfd write per empty->non-empty transition and drains everything queued
// in one call (the GIL is taken once per wake-up, not once per request); the
// answer goes back as bytes, finished from the loop's thread.
//
//   port, fd = start(port)          listen on 127.0.0.1:port (0: any); fd becomes readable when calls wait
//   drain() -> [(handle, request bytes, authorization bytes or None)]
//   reply(handle, bytes)            answer OK with these bytes (a serialised ModelInferResponse)
//   fail(handle, code, message)     answer with a gRPC status code (int) and message
//
// Each handle must get exactly one reply() or fail(). Not part of fwx; built by build.sh.

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>

namespace {

class Call;

struct Pending {
  Call* call;
  std::string raw;
  std::string auth;
  bool has_auth;
};

std::mutex g_mu;
std::deque<Pending> g_queue;
bool g_signaled = false;
int g_fd = -1;

void Enqueue(Pending p) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_queue.push_back(std::move(p));
    if (!g_signaled) g_signaled = wake = true;
  }
  if (wake) {
    uint64_t one = 1;
    (void)!write(g_fd, &one, sizeof one);
  }
}

class Call : public grpc::ServerGenericBidiReactor {
 public:
  explicit Call(grpc::GenericCallbackServerContext* ctx) : ctx_(ctx) { StartRead(&in_); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish({grpc::StatusCode::INVALID_ARGUMENT, "no request message"});
      return;
    }
    if (ctx_->method() != "/inference.GRPCInferenceService/ModelInfer") {
      Finish({grpc::StatusCode::UNIMPLEMENTED, "only ModelInfer is served by this prototype"});
      return;
    }
    Pending p{this, {}, {}, false};
    std::vector<grpc::Slice> slices;
    (void)in_.Dump(&slices);
    p.raw.reserve(in_.Length());
    for (const auto& s : slices) p.raw.append(reinterpret_cast<const char*>(s.begin()), s.size());
    auto it = ctx_->client_metadata().find("authorization");
    if (it != ctx_->client_metadata().end()) {
      p.auth.assign(it->second.data(), it->second.size());
      p.has_auth = true;
    }
    Enqueue(std::move(p));
  }
  void Reply(const char* data, size_t size) {
    grpc::Slice slice(data, size);
    out_ = grpc::ByteBuffer(&slice, 1);
    StartWriteAndFinish(&out_, grpc::WriteOptions(), grpc::Status::OK);
  }
  void Fail(int code, const std::string& message) { Finish({static_cast<grpc::StatusCode>(code), message}); }
  void OnDone() override { delete this; }

 private:
  grpc::GenericCallbackServerContext* ctx_;
  grpc::ByteBuffer in_;
  grpc::ByteBuffer out_;
};

class Service : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    return new Call(ctx);
  }
};

Service g_service;
std::unique_ptr<grpc::Server> g_server;

PyObject* Start(PyObject*, PyObject* args) {
  int port = 0;
  if (!PyArg_ParseTuple(args, "i", &port)) return nullptr;
  if (g_server) {
    PyErr_SetString(PyExc_RuntimeError, "already started");
    return nullptr;
  }
  g_fd = eventfd(0, EFD_NONBLOCK);
  int bound = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(), &bound);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.RegisterCallbackGenericService(&g_service);
  Py_BEGIN_ALLOW_THREADS g_server = builder.BuildAndStart();
  Py_END_ALLOW_THREADS if (!g_server || bound == 0) {
    PyErr_SetString(PyExc_OSError, "cannot listen on 127.0.0.1");
    return nullptr;
  }
  return Py_BuildValue("(ii)", bound, g_fd);
}

PyObject* Drain(PyObject*, PyObject*) {
  std::deque<Pending> taken;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    taken.swap(g_queue);
    g_signaled = false;
    uint64_t count;
    (void)!read(g_fd, &count, sizeof count);
  }
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(taken.size()));
  Py_ssize_t i = 0;
  for (auto& p : taken) {
    PyObject* auth = p.has_auth ? PyBytes_FromStringAndSize(p.auth.data(), static_cast<Py_ssize_t>(p.auth.size()))
                                : (Py_INCREF(Py_None), Py_None);
    PyObject* item = Py_BuildValue("(Ky#N)", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p.call)),
                                   p.raw.data(), static_cast<Py_ssize_t>(p.raw.size()), auth);
    PyList_SET_ITEM(list, i++, item);
  }
  return list;
}

PyObject* Reply(PyObject*, PyObject* args) {
  unsigned long long handle;
  Py_buffer data;
  if (!PyArg_ParseTuple(args, "Ky*", &handle, &data)) return nullptr;
  reinterpret_cast<Call*>(static_cast<uintptr_t>(handle))->Reply(static_cast<const char*>(data.buf),
                                                                  static_cast<size_t>(data.len));
  PyBuffer_Release(&data);
  Py_RETURN_NONE;
}

PyObject* Fail(PyObject*, PyObject* args) {
  unsigned long long handle;
  int code;
  const char* message;
  if (!PyArg_ParseTuple(args, "Kis", &handle, &code, &message)) return nullptr;
  reinterpret_cast<Call*>(static_cast<uintptr_t>(handle))->Fail(code, message);
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"start", Start, METH_VARARGS, "start(port) -> (bound port, eventfd)"},
    {"drain", Drain, METH_NOARGS, "drain() -> [(handle, request bytes, authorization or None)]"},
    {"reply", Reply, METH_VARARGS, "reply(handle, bytes)"},
    {"fail", Fail, METH_VARARGS, "fail(handle, code, message)"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_fwx_native_grpc", nullptr, -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__fwx_native_grpc() { return PyModule_Create(&kModule); }

// A native gRPC front end for measuring, not for shipping: what a C++ server
// (libgrpc++ callback API, generic service, bytes in / bytes out) costs per
// KServe v2 ModelInfer call on this machine, next to Python grpcio's floor.
//
// Modes (benchmarks/grpc_floor.py starts them; see build.sh):
//   echo     fixed ModelInferResponse bytes back, request not parsed
//            (the native counterpart of grpc_floor.py's aio-bytes row);
//   decode   parse the ModelInferRequest, build and serialise a response from
//            its first raw input (the counterpart of aio-decode);
//   forward  parse the request and forward its raw tensor bytes to fwx's REST
//            endpoint (binary tensor extension) over keep-alive loopback
//            connections; turn the REST answer back into a ModelInferResponse.
//            The "native front end + fwx REST path" design, minus everything a
//            product would add (TLS, metadata RPCs, streaming, health): enough
//            to price it. --upstream picks how the REST leg runs: epoll (one
//            event-driven I/O thread, the default), pool (a blocking
//            connection per thread of our own) or inline (blocking, on gRPC's
//            callback thread).
//
//   native_grpc MODE --port-file PATH [--response FILE] [--rest HOST:PORT]
//               [--upstream epoll|pool|inline] [--connections N]

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>

#include "grpc_service.pb.h"

namespace {

std::string Flatten(const grpc::ByteBuffer& buf) {
  std::vector<grpc::Slice> slices;
  (void)buf.Dump(&slices);
  std::string out;
  out.reserve(buf.Length());
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// ---- a minimal JSON reader: enough for fwx's REST infer answer ----------------
struct Json {
  enum Kind { kNull, kBool, kNum, kStr, kArr, kObj } kind = kNull;
  double num = 0;
  bool b = false;
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;
  const Json* get(const std::string& k) const {
    auto it = obj.find(k);
    return it == obj.end() ? nullptr : &it->second;
  }
};

struct JsonReader {
  const char* p;
  const char* end;
  bool ok = true;
  void ws() {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
  }
  std::string string() {
    std::string s;
    ++p;  // opening quote
    while (p < end && *p != '"') {
      if (*p == '\\' && p + 1 < end) {
        ++p;
        char c = *p;
        s.push_back(c == 'n' ? '\n' : c == 't' ? '\t' : c);  // \uXXXX kept raw: names are ASCII here
      } else {
        s.push_back(*p);
      }
      ++p;
    }
    ++p;
    return s;
  }
  Json value() {
    Json v;
    ws();
    if (p >= end) {
      ok = false;
      return v;
    }
    if (*p == '{') {
      v.kind = Json::kObj;
      ++p;
      ws();
      if (*p == '}') {
        ++p;
        return v;
      }
      while (ok && p < end) {
        ws();
        std::string k = string();
        ws();
        ++p;  // ':'
        v.obj[k] = value();
        ws();
        if (*p == ',') {
          ++p;
          continue;
        }
        ++p;  // '}'
        break;
      }
    } else if (*p == '[') {
      v.kind = Json::kArr;
      ++p;
      ws();
      if (*p == ']') {
        ++p;
        return v;
      }
      while (ok && p < end) {
        v.arr.push_back(value());
        ws();
        if (*p == ',') {
          ++p;
          continue;
        }
        ++p;  // ']'
        break;
      }
    } else if (*p == '"') {
      v.kind = Json::kStr;
      v.str = string();
    } else if (*p == 't' || *p == 'f') {
      v.kind = Json::kBool;
      v.b = *p == 't';
      p += v.b ? 4 : 5;
    } else if (*p == 'n') {
      p += 4;
    } else {
      v.kind = Json::kNum;
      char* stop = nullptr;
      v.num = std::strtod(p, &stop);
      if (stop == p) ok = false;
      p = stop;
    }
    return v;
  }
};

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

// ---- one blocking keep-alive HTTP/1.1 connection to fwx's REST port -----------
class RestConnection {
 public:
  RestConnection(std::string host, int port) : host_(std::move(host)), port_(port) {}
  ~RestConnection() {
    if (fd_ >= 0) close(fd_);
  }

  // POST `body` to `path`; fills status, header (JSON) and binary tail. False on I/O failure.
  bool Post(const std::string& path, const std::string& head_extra, const std::string& body, size_t json_len,
            int* status, std::string* response) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (fd_ < 0 && !Connect()) return false;
      std::string req = "POST " + path + " HTTP/1.1\r\nHost: " + host_ +
                        "\r\nContent-Type: application/octet-stream\r\nInference-Header-Content-Length: " +
                        std::to_string(json_len) + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
                        head_extra + "\r\n";
      req += body;
      if (SendAll(req) && ReadResponse(status, response)) return true;
      close(fd_);
      fd_ = -1;
      buf_.clear();
    }
    return false;
  }

  size_t last_json_len = 0;

 private:
  bool Connect() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port_);
    inet_pton(AF_INET, host_.c_str(), &addr.sin_addr);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd_);
      fd_ = -1;
      return false;
    }
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return true;
  }
  bool SendAll(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  bool Fill() {
    char tmp[65536];
    ssize_t n = recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }
  bool ReadResponse(int* status, std::string* body) {
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!Fill()) return false;
    std::string head = buf_.substr(0, head_end);
    *status = std::atoi(head.c_str() + 9);
    size_t length = 0;
    last_json_len = 0;
    std::istringstream lines(head);
    std::string line;
    while (std::getline(lines, line)) {
      std::string lower = line;
      for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (lower.rfind("content-length:", 0) == 0) length = std::strtoul(line.c_str() + 15, nullptr, 10);
      if (lower.rfind("inference-header-content-length:", 0) == 0)
        last_json_len = std::strtoul(line.c_str() + 32, nullptr, 10);
    }
    size_t total = head_end + 4 + length;
    while (buf_.size() < total)
      if (!Fill()) return false;
    body->assign(buf_, head_end + 4, length);
    buf_.erase(0, total);
    if (last_json_len == 0) last_json_len = length;  // a JSON-only answer (errors)
    return true;
  }

  std::string host_;
  int port_;
  int fd_ = -1;
  std::string buf_;
};

grpc::StatusCode CodeOf(int http) {
  switch (http) {
    case 400: return grpc::StatusCode::INVALID_ARGUMENT;
    case 401: return grpc::StatusCode::UNAUTHENTICATED;
    case 403: return grpc::StatusCode::PERMISSION_DENIED;
    case 404: return grpc::StatusCode::NOT_FOUND;
    case 408: case 504: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case 413: case 429: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 503: return grpc::StatusCode::UNAVAILABLE;
    default: return grpc::StatusCode::INTERNAL;
  }
}

// One ModelInferRequest as a KServe v2 REST call with the binary tensor extension.
struct RestCall {
  std::string bytes;  // the whole HTTP/1.1 request
};

grpc::Status BuildRest(const std::string& raw, const std::string& host, const std::string& authorization,
                       RestCall* call, std::string* path_out, std::string* head_extra, std::string* body,
                       size_t* json_len) {
  inference::ModelInferRequest req;
  if (!req.ParseFromString(raw)) return {grpc::StatusCode::INVALID_ARGUMENT, "ModelInfer: request does not parse"};
  if (req.raw_input_contents_size() != req.inputs_size())
    return {grpc::StatusCode::INVALID_ARGUMENT, "ModelInfer: every input must come in raw_input_contents"};
  std::string json = "{";
  if (!req.id().empty()) json += "\"id\":" + JsonString(req.id()) + ",";
  json += "\"inputs\":[";
  for (int i = 0; i < req.inputs_size(); ++i) {
    const auto& t = req.inputs(i);
    if (i) json += ",";
    json += "{\"name\":" + JsonString(t.name()) + ",\"datatype\":" + JsonString(t.datatype()) + ",\"shape\":[";
    for (int d = 0; d < t.shape_size(); ++d) json += (d ? "," : "") + std::to_string(t.shape(d));
    json += "],\"parameters\":{\"binary_data_size\":" + std::to_string(req.raw_input_contents(i).size()) + "}}";
  }
  json += "],\"parameters\":{\"binary_data_output\":true}}";
  *json_len = json.size();
  *body = json;
  for (const auto& blob : req.raw_input_contents()) *body += blob;
  *path_out = "/v2/models/" + req.model_name() +
              (req.model_version().empty() ? "" : "/versions/" + req.model_version()) + "/infer";
  *head_extra = authorization.empty() ? "" : "Authorization: " + authorization + "\r\n";
  if (call != nullptr) {
    call->bytes = "POST " + *path_out + " HTTP/1.1\r\nHost: " + host +
                  "\r\nContent-Type: application/octet-stream\r\nInference-Header-Content-Length: " +
                  std::to_string(*json_len) + "\r\nContent-Length: " + std::to_string(body->size()) + "\r\n" +
                  *head_extra + "\r\n" + *body;
  }
  return grpc::Status::OK;
}

// fwx's REST answer (status, JSON header of json_len bytes + binary outputs) -> ModelInferResponse bytes.
grpc::Status ParseRest(int status, const std::string& answer, size_t json_len, std::string* out) {
  JsonReader reader{answer.data(), answer.data() + json_len};
  Json head = reader.value();
  if (status != 200 || !reader.ok || head.kind != Json::kObj) {
    const Json* err = head.get("error");
    return {CodeOf(status), err && err->kind == Json::kStr ? err->str : "fwx REST answered " + std::to_string(status)};
  }
  inference::ModelInferResponse resp;
  if (const Json* v = head.get("model_name")) resp.set_model_name(v->str);
  if (const Json* v = head.get("model_version")) resp.set_model_version(v->str);
  if (const Json* v = head.get("id")) resp.set_id(v->str);
  size_t offset = json_len;
  if (const Json* outputs = head.get("outputs")) {
    for (const Json& o : outputs->arr) {
      auto* t = resp.add_outputs();
      if (const Json* v = o.get("name")) t->set_name(v->str);
      if (const Json* v = o.get("datatype")) t->set_datatype(v->str);
      if (const Json* v = o.get("shape"))
        for (const Json& d : v->arr) t->add_shape(static_cast<int64_t>(d.num));
      const Json* params = o.get("parameters");
      const Json* size = params ? params->get("binary_data_size") : nullptr;
      if (!size) return {grpc::StatusCode::INTERNAL, "fwx REST answered an output without binary data"};
      size_t n = static_cast<size_t>(size->num);
      if (offset + n > answer.size()) return {grpc::StatusCode::INTERNAL, "fwx REST answer is truncated"};
      resp.add_raw_output_contents(answer.substr(offset, n));
      offset += n;
    }
  }
  resp.SerializeToString(out);
  return grpc::Status::OK;
}

// ModelInferRequest -> one blocking REST call -> ModelInferResponse (or an error status).
grpc::Status Forward(RestConnection* conn, const std::string& raw, const std::string& authorization,
                     std::string* out) {
  std::string path, extra, body;
  size_t json_len = 0;
  grpc::Status built = BuildRest(raw, "", authorization, nullptr, &path, &extra, &body, &json_len);
  if (!built.ok()) return built;
  int status = 0;
  std::string answer;
  if (!conn->Post(path, extra, body, json_len, &status, &answer))
    return {grpc::StatusCode::UNAVAILABLE, "the fwx REST endpoint did not answer"};
  return ParseRest(status, answer, conn->last_json_len, out);
}

// A complete HTTP/1.1 response at the front of buf: status, body, JSON header length; consumed from buf.
bool TakeResponse(std::string* buf, int* status, std::string* body, size_t* json_len) {
  size_t head_end = buf->find("\r\n\r\n");
  if (head_end == std::string::npos) return false;
  size_t length = 0, header_len = 0;
  size_t pos = 0;
  while (pos < head_end) {
    size_t eol = buf->find("\r\n", pos);
    if (eol == std::string::npos || eol > head_end) eol = head_end;
    if (pos == 0) {
      *status = std::atoi(buf->c_str() + 9);
    } else {
      size_t colon = buf->find(':', pos);
      if (colon != std::string::npos && colon < eol) {
        std::string key = buf->substr(pos, colon - pos);
        for (auto& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (key == "content-length") length = std::strtoul(buf->c_str() + colon + 1, nullptr, 10);
        if (key == "inference-header-content-length") header_len = std::strtoul(buf->c_str() + colon + 1, nullptr, 10);
      }
    }
    pos = eol + 2;
  }
  size_t total = head_end + 4 + length;
  if (buf->size() < total) return false;
  body->assign(*buf, head_end + 4, length);
  buf->erase(0, total);
  *json_len = header_len ? header_len : length;
  return true;
}

// ---- forward mode, --upstream epoll: one event-driven I/O thread, non-blocking keep-alive connections ----
// The shape of a production proxy's upstream side (Envoy's worker): requests queue to the I/O thread
// (one eventfd wake, amortised when busy), each goes out on an idle connection, answers are read as
// epoll reports them, and the gRPC answer is finished from this thread.
class EpollUpstream {
 public:
  using Done = std::function<void(int status, const std::string& body, size_t json_len, bool ok)>;
  EpollUpstream(std::string host, int port, int max_connections)
      : host_(std::move(host)), port_(port), max_(max_connections) {
    epfd_ = epoll_create1(0);
    evfd_ = eventfd(0, EFD_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, evfd_, &ev);
    thread_ = std::thread([this] { Loop(); });
  }
  void Submit(std::string request, Done done) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      incoming_.push_back({std::move(request), std::move(done)});
    }
    uint64_t one = 1;
    (void)!write(evfd_, &one, sizeof one);
  }

 private:
  struct Job {
    std::string request;
    Done done;
  };
  struct Conn {
    int fd = -1;
    bool busy = false;
    Job job;
    size_t sent = 0;
    std::string in;
  };

  Conn* Open() {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port_);
    inet_pton(AF_INET, host_.c_str(), &addr.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
      close(fd);
      return nullptr;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto* c = new Conn;
    c->fd = fd;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
    ev.data.ptr = c;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
    conns_.push_back(c);
    return c;
  }
  void Fail(Conn* c) {
    if (c->busy) c->job.done(0, "", 0, false);
    epoll_ctl(epfd_, EPOLL_CTL_DEL, c->fd, nullptr);
    close(c->fd);
    conns_.erase(std::find(conns_.begin(), conns_.end(), c));
    delete c;
  }
  void Flush(Conn* c) {
    while (c->sent < c->job.request.size()) {
      ssize_t n = send(c->fd, c->job.request.data() + c->sent, c->job.request.size() - c->sent, MSG_NOSIGNAL);
      if (n > 0) {
        c->sent += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EINPROGRESS || errno == ENOTCONN)) {
        return;  // EPOLLOUT (edge-triggered) tells us when to go on
      } else {
        Fail(c);
        return;
      }
    }
  }
  void Assign() {
    while (!pending_.empty()) {
      Conn* free = nullptr;
      for (Conn* c : conns_)
        if (!c->busy) {
          free = c;
          break;
        }
      if (free == nullptr && static_cast<int>(conns_.size()) < max_) free = Open();
      if (free == nullptr) {
        if (conns_.empty()) {  // cannot connect at all: fail what waits
          for (auto& j : pending_) j.done(0, "", 0, false);
          pending_.clear();
        }
        return;
      }
      free->busy = true;
      free->job = std::move(pending_.front());
      pending_.pop_front();
      free->sent = 0;
      Flush(free);
    }
  }
  void Read(Conn* c) {
    char tmp[65536];
    for (;;) {
      ssize_t n = recv(c->fd, tmp, sizeof tmp, 0);
      if (n > 0) {
        c->in.append(tmp, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EAGAIN) break;
      Fail(c);  // closed or broken
      return;
    }
    int status = 0;
    size_t json_len = 0;
    std::string body;
    if (c->busy && TakeResponse(&c->in, &status, &body, &json_len)) {
      Job job = std::move(c->job);
      c->busy = false;
      job.done(status, body, json_len, true);
    }
  }
  void Loop() {
    epoll_event events[64];
    for (;;) {
      int n = epoll_wait(epfd_, events, 64, -1);
      for (int i = 0; i < n; ++i) {
        if (events[i].data.ptr == nullptr) {
          uint64_t count;
          (void)!read(evfd_, &count, sizeof count);
          std::lock_guard<std::mutex> lock(mu_);
          for (auto& j : incoming_) pending_.push_back(std::move(j));
          incoming_.clear();
          continue;
        }
        Conn* c = static_cast<Conn*>(events[i].data.ptr);
        if (std::find(conns_.begin(), conns_.end(), c) == conns_.end()) continue;  // failed earlier in this round
        if (events[i].events & (EPOLLERR | EPOLLHUP)) {
          Fail(c);
          continue;
        }
        if ((events[i].events & EPOLLOUT) && c->busy) Flush(c);
        if (std::find(conns_.begin(), conns_.end(), c) == conns_.end()) continue;
        if (events[i].events & EPOLLIN) Read(c);
      }
      Assign();
    }
  }

  std::string host_;
  int port_;
  int max_;
  int epfd_ = -1;
  int evfd_ = -1;
  std::mutex mu_;
  std::deque<Job> incoming_;  // from gRPC threads, under mu_
  std::deque<Job> pending_;   // I/O thread only
  std::vector<Conn*> conns_;  // I/O thread only
  std::thread thread_;
};

// ---- the worker pool for forward mode: blocking REST calls off gRPC's threads ----
class Pool {
 public:
  Pool(int workers, const std::string& host, int port) {
    for (int i = 0; i < workers; ++i)
      threads_.emplace_back([this, host, port] {
        RestConnection conn(host, port);
        for (;;) {
          std::function<void(RestConnection*)> job;
          {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [this] { return !jobs_.empty(); });
            job = std::move(jobs_.front());
            jobs_.pop_front();
          }
          job(&conn);
        }
      });
  }
  void Submit(std::function<void(RestConnection*)> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void(RestConnection*)>> jobs_;
  std::vector<std::thread> threads_;
};

struct Options {
  std::string mode;
  std::string fixed_response;
  std::string upstream = "epoll";    // forward mode: epoll | pool | inline
  EpollUpstream* epoll = nullptr;   // --upstream epoll: one I/O thread, --connections keep-alive connections
  Pool* pool = nullptr;             // --upstream pool: blocking REST calls on --connections threads of our own
  std::string rest_host;            // --upstream inline: blocking REST calls on gRPC's callback thread
  int rest_port = 0;
};

class Unary : public grpc::ServerGenericBidiReactor {
 public:
  Unary(grpc::GenericCallbackServerContext* ctx, const Options* opt) : ctx_(ctx), opt_(opt) { StartRead(&in_); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish({grpc::StatusCode::INVALID_ARGUMENT, "no request message"});
      return;
    }
    if (ctx_->method() != "/inference.GRPCInferenceService/ModelInfer") {
      Finish({grpc::StatusCode::UNIMPLEMENTED, "only ModelInfer is served here"});
      return;
    }
    if (opt_->mode == "echo") {
      out_ = ToBuffer(opt_->fixed_response);
      StartWriteAndFinish(&out_, grpc::WriteOptions(), grpc::Status::OK);
    } else if (opt_->mode == "decode") {
      inference::ModelInferRequest req;
      if (!req.ParseFromString(Flatten(in_))) {
        Finish({grpc::StatusCode::INVALID_ARGUMENT, "ModelInfer: request does not parse"});
        return;
      }
      inference::ModelInferResponse resp;
      resp.set_model_name(req.model_name());
      resp.set_model_version("1");
      resp.set_id(req.id());
      auto* t = resp.add_outputs();
      t->set_name("y");
      t->set_datatype("FP32");
      t->add_shape(1);
      t->add_shape(10);
      resp.add_raw_output_contents(req.raw_input_contents(0).substr(0, 40));
      out_ = ToBuffer(resp.SerializeAsString());
      StartWriteAndFinish(&out_, grpc::WriteOptions(), grpc::Status::OK);
    } else {
      std::string auth;
      auto it = ctx_->client_metadata().find("authorization");
      if (it != ctx_->client_metadata().end()) auth.assign(it->second.data(), it->second.size());
      std::string raw = Flatten(in_);
      if (opt_->epoll != nullptr) {
        RestCall call;
        std::string path, extra, body;
        size_t json_len = 0;
        grpc::Status built = BuildRest(raw, opt_->rest_host, auth, &call, &path, &extra, &body, &json_len);
        if (!built.ok()) {
          Finish(built);
          return;
        }
        opt_->epoll->Submit(std::move(call.bytes), [this](int status, const std::string& answer, size_t json_len,
                                                          bool ok) {
          if (!ok) {
            Finish({grpc::StatusCode::UNAVAILABLE, "the fwx REST endpoint did not answer"});
            return;
          }
          std::string bytes;
          grpc::Status parsed = ParseRest(status, answer, json_len, &bytes);
          if (!parsed.ok()) {
            Finish(parsed);
            return;
          }
          out_ = ToBuffer(bytes);
          StartWriteAndFinish(&out_, grpc::WriteOptions(), grpc::Status::OK);
        });
        return;
      }
      if (opt_->pool == nullptr) {
        thread_local RestConnection conn(opt_->rest_host, opt_->rest_port);
        std::string bytes;
        grpc::Status status = Forward(&conn, raw, auth, &bytes);
        if (!status.ok()) {
          Finish(status);
          return;
        }
        out_ = ToBuffer(bytes);
        StartWriteAndFinish(&out_, grpc::WriteOptions(), grpc::Status::OK);
        return;
      }
      opt_->pool->Submit([this, raw = std::move(raw), auth = std::move(auth)](RestConnection* conn) {
        std::string bytes;
        grpc::Status status = Forward(conn, raw, auth, &bytes);
        if (!status.ok()) {
          Finish(status);
          return;
        }
        out_ = ToBuffer(bytes);
        StartWriteAndFinish(&out_, grpc::WriteOptions(), grpc::Status::OK);
      });
    }
  }
  void OnDone() override { delete this; }

 private:
  grpc::GenericCallbackServerContext* ctx_;
  const Options* opt_;
  grpc::ByteBuffer in_;
  grpc::ByteBuffer out_;
};

class Service : public grpc::CallbackGenericService {
 public:
  explicit Service(const Options* opt) : opt_(opt) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    return new Unary(ctx, opt_);
  }

 private:
  const Options* opt_;
};

int Usage() {
  std::cerr << "usage: native_grpc echo|decode|forward --port-file PATH [--response FILE] [--rest HOST:PORT] "
               "[--upstream epoll|pool|inline] [--connections N]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  Options opt;
  opt.mode = argv[1];
  std::string port_file, response_file, rest = "127.0.0.1:8000";
  int connections = 32;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--port-file") port_file = v;
    else if (k == "--response") response_file = v;
    else if (k == "--rest") rest = v;
    else if (k == "--connections") connections = std::atoi(v.c_str());
    else if (k == "--upstream") opt.upstream = v;
    else return Usage();
  }
  if (port_file.empty() || (opt.mode != "echo" && opt.mode != "decode" && opt.mode != "forward")) return Usage();
  if (opt.mode == "echo") {
    std::ifstream in(response_file, std::ios::binary);
    if (!in) {
      std::cerr << "native_grpc: echo mode needs --response FILE (serialised ModelInferResponse)\n";
      return 2;
    }
    opt.fixed_response.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::unique_ptr<Pool> pool;
  std::unique_ptr<EpollUpstream> epoll;
  if (opt.mode == "forward") {
    auto colon = rest.rfind(':');
    opt.rest_host = rest.substr(0, colon);
    opt.rest_port = std::atoi(rest.c_str() + colon + 1);
    if (opt.upstream == "epoll") {
      epoll = std::make_unique<EpollUpstream>(opt.rest_host, opt.rest_port, connections);
      opt.epoll = epoll.get();
    } else if (opt.upstream == "pool") {
      pool = std::make_unique<Pool>(connections, opt.rest_host, opt.rest_port);
      opt.pool = pool.get();
    } else if (opt.upstream != "inline") {
      return Usage();
    }
  }
  Service service(&opt);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::cerr << "native_grpc: cannot listen on 127.0.0.1\n";
    return 1;
  }
  {
    std::ofstream(port_file + ".tmp") << port;
  }
  std::rename((port_file + ".tmp").c_str(), port_file.c_str());
  server->Wait();
  return 0;
}

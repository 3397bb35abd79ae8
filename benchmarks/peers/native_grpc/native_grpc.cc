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
//            connections, one blocking connection per worker thread; turn the
//            REST answer back into a ModelInferResponse. The "native front end
//            + fwx REST path" design, minus everything a product would add
//            (TLS, metadata RPCs, streaming, health): enough to price it.
//
//   native_grpc MODE --port-file PATH [--response FILE] [--rest HOST:PORT] [--workers N]

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

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

// ModelInferRequest -> one REST call -> ModelInferResponse (or an error status).
grpc::Status Forward(RestConnection* conn, const std::string& raw, const std::string& authorization,
                     std::string* out) {
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
  std::string body = json;
  for (const auto& blob : req.raw_input_contents()) body += blob;
  std::string path = "/v2/models/" + req.model_name() +
                     (req.model_version().empty() ? "" : "/versions/" + req.model_version()) + "/infer";
  std::string extra = authorization.empty() ? "" : "Authorization: " + authorization + "\r\n";
  int status = 0;
  std::string answer;
  if (!conn->Post(path, extra, body, json.size(), &status, &answer))
    return {grpc::StatusCode::UNAVAILABLE, "the fwx REST endpoint did not answer"};
  JsonReader reader{answer.data(), answer.data() + conn->last_json_len};
  Json head = reader.value();
  if (status != 200 || !reader.ok || head.kind != Json::kObj) {
    const Json* err = head.get("error");
    return {CodeOf(status), err && err->kind == Json::kStr ? err->str : "fwx REST answered " + std::to_string(status)};
  }
  inference::ModelInferResponse resp;
  if (const Json* v = head.get("model_name")) resp.set_model_name(v->str);
  if (const Json* v = head.get("model_version")) resp.set_model_version(v->str);
  if (const Json* v = head.get("id")) resp.set_id(v->str);
  size_t offset = conn->last_json_len;
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
  Pool* pool = nullptr;   // forward mode with --workers N > 0: REST calls on N threads of our own
  std::string rest_host;  // forward mode with --workers 0: REST calls inline on gRPC's callback thread
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
               "[--workers N]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  Options opt;
  opt.mode = argv[1];
  std::string port_file, response_file, rest = "127.0.0.1:8000";
  int workers = 32;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--port-file") port_file = v;
    else if (k == "--response") response_file = v;
    else if (k == "--rest") rest = v;
    else if (k == "--workers") workers = std::atoi(v.c_str());
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
  if (opt.mode == "forward") {
    auto colon = rest.rfind(':');
    opt.rest_host = rest.substr(0, colon);
    opt.rest_port = std::atoi(rest.c_str() + colon + 1);
    if (workers > 0) {
      pool = std::make_unique<Pool>(workers, opt.rest_host, opt.rest_port);
      opt.pool = pool.get();
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

#include "common/tls.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

namespace graft::tls {

namespace {

// PEM files are small (the Debian CA bundle is about 200 KiB); a bound keeps `--ca /dev/zero`
// from reading forever.
constexpr size_t kMaxPemBytes = 4 << 20;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

}  // namespace

absl::StatusOr<std::string> read_pem_file(const std::string& path, const std::string& what) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no file given"));
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) {
    int err = errno;
    std::string message = absl::StrCat(what, " '", path, "': ", std::strerror(err));
    return err == EACCES ? absl::PermissionDeniedError(message) : absl::NotFoundError(message);
  }
  std::string out;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f.get())) > 0;) {
    if (out.size() + n > kMaxPemBytes)
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", path, "': larger than 4 MiB, not a PEM file"));
    out.append(buf, n);
  }
  if (std::ferror(f.get()))  // e.g. a directory
    return absl::NotFoundError(absl::StrCat(what, " '", path, "': ", std::strerror(errno)));
  return out;
}

namespace {

Bio memory_bio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// OpenSSL's reason for the last failure, or "" (and clears its error queue either way).
std::string openssl_reason() {
  unsigned long code = ERR_peek_last_error();
  std::string out;
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    out = absl::StrCat(" (", buf, ")");
  }
  ERR_clear_error();
  return out;
}

// Refuses to decrypt: without a callback OpenSSL would prompt on the terminal.
int no_passphrase(char*, int, int, void*) { return -1; }

std::time_t to_time_t(const ASN1_TIME* t) {
  std::tm tm{};
  if (!t || ASN1_TIME_to_tm(t, &tm) != 1) return 0;
  return timegm(&tm);
}

}  // namespace

std::string utc(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

absl::Status check_certificates(const std::string& pem, const std::string& path,
                                const std::string& what, CertificateInfo* info) {
  Bio bio = memory_bio(pem);
  int count = 0;
  while (Cert cert{PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)}) {
    if (count++ == 0 && info) {
      Bio name(BIO_new(BIO_s_mem()));
      X509_NAME_print_ex(name.get(), X509_get_subject_name(cert.get()), 0, XN_FLAG_RFC2253);
      char* data = nullptr;
      long n = BIO_get_mem_data(name.get(), &data);
      info->subject.assign(data, static_cast<size_t>(n));
      info->not_before = to_time_t(X509_get0_notBefore(cert.get()));
      info->not_after = to_time_t(X509_get0_notAfter(cert.get()));
    }
  }
  // The loop ends on "no more PEM blocks", which OpenSSL also records as an error.
  ERR_clear_error();
  if (count == 0)
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", path, "': no PEM certificate (-----BEGIN CERTIFICATE-----)"));
  if (info) info->count = count;
  return absl::OkStatus();
}

absl::Status check_private_key(const std::string& pem, const std::string& path,
                               const std::string& what) {
  Bio bio = memory_bio(pem);
  Key key(PEM_read_bio_PrivateKey(bio.get(), nullptr, &no_passphrase, nullptr));
  std::string reason = openssl_reason();
  if (key) return absl::OkStatus();
  if (pem.find("ENCRYPTED") != std::string::npos)
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", path,
                     "': the key is encrypted; give an unencrypted PEM key (openssl pkey -in "
                     "KEY -out PLAIN)"));
  return absl::InvalidArgumentError(
      absl::StrCat(what, " '", path, "': no PEM private key", reason));
}

absl::StatusOr<std::string> read_certificates(const std::string& path, const std::string& what,
                                              CertificateInfo* info) {
  auto pem = read_pem_file(path, what);
  if (!pem.ok()) return pem.status();
  if (auto st = check_certificates(*pem, path, what, info); !st.ok()) return st;
  return pem;
}

absl::StatusOr<std::string> read_private_key(const std::string& path, const std::string& what) {
  auto pem = read_pem_file(path, what);
  if (!pem.ok()) return pem.status();
  if (auto st = check_private_key(*pem, path, what); !st.ok()) return st;
  return pem;
}

absl::Status check_key_matches(const std::string& cert_pem, const std::string& key_pem,
                               const std::string& cert_path, const std::string& key_path) {
  Bio cert_bio = memory_bio(cert_pem), key_bio = memory_bio(key_pem);
  Cert cert(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  Key key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, &no_passphrase, nullptr));
  bool match = cert && key && X509_check_private_key(cert.get(), key.get()) == 1;
  ERR_clear_error();
  if (!match)
    return absl::InvalidArgumentError(absl::StrCat(
        "the private key '", key_path, "' does not belong to the certificate '", cert_path, "'"));
  return absl::OkStatus();
}

grpc::ChannelArguments default_channel_args() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);
  args.SetMaxSendMessageSize(8 << 20);
  return args;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> make_channel(const std::string& target,
                                                            const ClientOptions& options,
                                                            grpc::ChannelArguments args) {
  if (!options.on())
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  if (options.cert_file.empty() != options.key_file.empty())
    return absl::InvalidArgumentError(
        "a client certificate needs its key: give both --cert and --key");
  grpc::SslCredentialsOptions ssl;
  if (!options.ca_file.empty()) {
    auto roots = read_certificates(options.ca_file, "CA bundle --ca");
    if (!roots.ok()) return roots.status();
    ssl.pem_root_certs = std::move(*roots);
  }
  if (!options.cert_file.empty()) {
    auto chain = read_certificates(options.cert_file, "client certificate --cert");
    if (!chain.ok()) return chain.status();
    auto key = read_private_key(options.key_file, "client key --key");
    if (!key.ok()) return key.status();
    if (auto st = check_key_matches(*chain, *key, options.cert_file, options.key_file); !st.ok())
      return st;
    ssl.pem_cert_chain = std::move(*chain);
    ssl.pem_private_key = std::move(*key);
  }
  if (!options.server_name.empty()) args.SetSslTargetNameOverride(options.server_name);
  return grpc::CreateCustomChannel(target, grpc::SslCredentials(ssl), args);
}

absl::Status explain_connection_failure(const absl::Status& status, bool tls) {
  const std::string message(status.message());
  auto has = [&](const char* text) { return message.find(text) != std::string::npos; };
  const char* hint = nullptr;
  if (!tls && has("Socket closed")) {
    hint = "the server closed the connection; if it serves TLS, connect with --tls (and --ca)";
  } else if (tls && has("wrong version number")) {
    hint = "the server does not speak TLS on this port: connect without --tls";
  } else if (tls && has("certificate verify failed")) {
    hint =
        "the server's certificate is not signed by a CA in --ca (without --ca: the system's "
        "trusted CAs), or it has expired";
  } else if (tls && has("Peer name")) {
    hint = "connect with the name the certificate carries, or give it with --server-name";
  } else if (tls && has("Socket closed")) {
    hint =
        "the server closed the connection after the TLS handshake: it may require a client "
        "certificate (--cert, --key) signed by a CA it trusts";
  }
  if (!hint) return status;
  return absl::Status(status.code(), absl::StrCat(message, " (", hint, ")"));
}

void apply_environment(ClientOptions* o) {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  if (!o->enabled) {
    std::string v = absl::AsciiStrToLower(env("GRAFT_TLS"));
    o->enabled = v == "1" || v == "true" || v == "yes" || v == "on";
  }
  if (o->ca_file.empty()) o->ca_file = env("GRAFT_TLS_CA");
  if (o->cert_file.empty()) o->cert_file = env("GRAFT_TLS_CERT");
  if (o->key_file.empty()) o->key_file = env("GRAFT_TLS_KEY");
  if (o->server_name.empty()) o->server_name = env("GRAFT_TLS_SERVER_NAME");
}

}  // namespace graft::tls

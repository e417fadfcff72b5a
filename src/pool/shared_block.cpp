// Shared blocks: their checks, and their transfer over a Unix socket or as a token.
#include <mgm/error.hpp>
#include <mgm/pool/shared_block.hpp>

#include "../detail/fmt.hpp"

#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <system_error>

namespace mgm {

std::size_t shared_block::mapped_bytes() const noexcept {
  std::size_t n = 0;
  for (const auto& c : chunks) n = c.bytes > SIZE_MAX - n ? SIZE_MAX : n + c.bytes;  // saturates: validate() refuses
  return n;
}

void shared_block::validate() const {
  MGM_EXPECTS(!chunks.empty(), "shared_block: no chunks");
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    MGM_EXPECTS(chunks[i].fd.get() >= 0, fmt::format("shared_block: chunk {} has no descriptor", i));
    MGM_EXPECTS(chunks[i].bytes != 0, fmt::format("shared_block: chunk {} has 0 bytes", i));
  }
  const std::size_t mapped = mapped_bytes();
  MGM_EXPECTS(mapped != SIZE_MAX, "shared_block: its chunks' sizes overflow");
  MGM_EXPECTS(size != 0 && offset < mapped && size <= mapped - offset,
              fmt::format("shared_block: a block of {} bytes at offset {} does not lie inside its {} bytes of chunks",
                          size, offset, mapped));
}

namespace {

constexpr std::uint32_t wire_magic = 0x4d474d42;  // "MGMB"
constexpr std::uint32_t wire_version = 1;
constexpr std::size_t fds_per_message = 250;  // under the kernel's SCM_MAX_FD (253)

// The fixed part of each message; the chunk sizes of its descriptors follow.
struct wire_header {
  std::uint32_t magic;
  std::uint32_t version;
  std::int32_t device;
  std::uint32_t count;  // descriptors (and sizes) in this message
  std::uint64_t offset;
  std::uint64_t size;
  std::uint64_t total;  // chunks in the whole block
  std::uint64_t first;  // index of this message's first chunk
};

[[noreturn]] void fail_errno(const std::string& what) { throw std::system_error{errno, std::generic_category(), what}; }

// One message: the header and the chunk sizes, with room for `fds` descriptors in `control`.
struct wire_message {
  wire_header header{};
  std::vector<std::uint64_t> sizes;
  std::vector<char> control;
  iovec iov[2]{};
  msghdr msg{};

  wire_message(std::size_t count, std::size_t fds) : sizes(count), control(CMSG_SPACE(fds * sizeof(int))) {
    iov[0] = {&header, sizeof header};
    iov[1] = {sizes.data(), sizes.size() * sizeof(std::uint64_t)};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
  }
  wire_message(const wire_message&) = delete;
  wire_message& operator=(const wire_message&) = delete;
};

void send_part(int socket, const shared_block& b, std::size_t first, std::size_t count) {
  wire_message m{count, count};
  m.header = {wire_magic, wire_version, b.device.value(), static_cast<std::uint32_t>(count),
              b.offset,   b.size,       b.chunks.size(),  first};
  std::vector<int> fds(count);
  for (std::size_t i = 0; i < count; ++i) {
    m.sizes[i] = b.chunks[first + i].bytes;
    fds[i] = b.chunks[first + i].fd.get();
  }
  cmsghdr* cm = CMSG_FIRSTHDR(&m.msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(count * sizeof(int));
  std::memcpy(CMSG_DATA(cm), fds.data(), count * sizeof(int));
  const std::size_t want = sizeof m.header + count * sizeof(std::uint64_t);
  ssize_t sent = 0;
  do {
    sent = ::sendmsg(socket, &m.msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) fail_errno("send_shared_block: sendmsg");
  if (static_cast<std::size_t>(sent) != want) {
    throw std::system_error{EMSGSIZE, std::generic_category(), "send_shared_block: the message was cut short"};
  }
}

}  // namespace

void send_shared_block(int socket, const shared_block& b) {
  b.validate();
  for (std::size_t first = 0; first < b.chunks.size(); first += fds_per_message) {
    send_part(socket, b, first, std::min(fds_per_message, b.chunks.size() - first));
  }
}

shared_block receive_shared_block(int socket) {
  shared_block b;
  std::size_t total = 1;
  while (b.chunks.size() < total) {
    wire_message m{fds_per_message, fds_per_message};
    const wire_header& h = m.header;
    msghdr& msg = m.msg;
    ssize_t got = 0;
    do {
      got = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
    } while (got < 0 && errno == EINTR);
    if (got < 0) fail_errno("receive_shared_block: recvmsg");
    if (got == 0) throw std::system_error{ECONNRESET, std::generic_category(), "receive_shared_block: the peer closed the socket"};
    // Take the descriptors first: whatever is wrong with the message, none of them leaks.
    std::vector<unique_fd> fds;
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < n; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
        fds.emplace_back(fd);
      }
    }
    MGM_EXPECTS((msg.msg_flags & MSG_CTRUNC) == 0, "receive_shared_block: descriptors were cut off");
    MGM_EXPECTS((msg.msg_flags & MSG_TRUNC) == 0, "receive_shared_block: the message is longer than a shared block's");
    MGM_EXPECTS(static_cast<std::size_t>(got) >= sizeof h && h.magic == wire_magic,
                "receive_shared_block: the message is not a shared block");
    MGM_EXPECTS(h.version == wire_version, fmt::format("receive_shared_block: version {} (this library reads {})",
                                                       h.version, wire_version));
    MGM_EXPECTS(h.count <= fds_per_message && fds.size() == h.count &&
                    static_cast<std::size_t>(got) == sizeof h + h.count * sizeof(std::uint64_t),
                fmt::format("receive_shared_block: {} descriptors and {} bytes for {} chunks", fds.size(), got, h.count));
    if (b.chunks.empty()) {
      total = h.total;
      MGM_EXPECTS(total != 0 && total < (std::size_t{1} << 24), "receive_shared_block: a block with no chunks");
      b.device = device_id{h.device};
      b.offset = h.offset;
      b.size = h.size;
    }
    MGM_EXPECTS(h.first == b.chunks.size() && h.total == total && h.first + h.count <= total,
                "receive_shared_block: messages out of order");
    for (std::size_t i = 0; i < h.count; ++i) b.chunks.push_back(shared_chunk{std::move(fds[i]), m.sizes[i]});
  }
  b.validate();
  return b;
}

namespace {

// What a descriptor refers to: a token names each chunk's file as well as its number, since a
// number freed in the exporter is soon another file's.
struct file_identity {
  std::uint64_t device{0};
  std::uint64_t inode{0};
};
file_identity identity_of(int fd) {
  struct ::stat st {};  // POSIX's: mgm::stat (pool_statistics.hpp) would hide it here
  if (::fstat(fd, &st) != 0) fail_errno("shared_block_token: fstat");
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

// Reads an unsigned decimal up to `stop` (or the end, for stop '\0') and moves past it.
template <class T>
bool take_number(std::string_view& s, T& out, char stop) {
  if (s.empty() || s.front() < '0' || s.front() > '9') return false;  // no sign, no space
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc{}) return false;
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  if (s.empty()) return stop == '\0';
  if (s.front() != stop) return false;
  s.remove_prefix(1);
  return true;
}

}  // namespace

std::string shared_block_token(const shared_block& b) {
  b.validate();
  std::string t = fmt::format("mgm-ipc1:{}:{}:{}:{}:", ::getpid(), b.device.value(), b.offset, b.size);
  for (std::size_t i = 0; i < b.chunks.size(); ++i) {
    const file_identity id = identity_of(b.chunks[i].fd.get());
    t += fmt::format("{}{}/{}/{}/{}", i == 0 ? "" : ",", b.chunks[i].fd.get(), b.chunks[i].bytes, id.device, id.inode);
  }
  return t;
}

shared_block open_shared_block_token(std::string_view token) {
  const auto malformed = [&token](const char* why) {
    return logic_error{fmt::format("open_shared_block_token: '{}' is not a shared-block token ({})",
                                   token.substr(0, 120), why)};
  };
  constexpr std::string_view prefix = "mgm-ipc1:";
  if (!token.starts_with(prefix)) throw malformed("it does not begin with mgm-ipc1:");
  std::string_view s = token.substr(prefix.size());
  int pid = 0;
  int device = 0;
  std::size_t offset = 0;
  std::size_t size = 0;
  if (!take_number(s, pid, ':') || pid <= 0 || !take_number(s, device, ':') || !take_number(s, offset, ':') ||
      !take_number(s, size, ':')) {
    throw malformed("its pid, device, offset or size");
  }
  struct wanted {
    int fd;
    std::size_t bytes;
    file_identity id;
  };
  std::vector<wanted> list;
  while (true) {
    const std::size_t comma = s.find(',');
    std::string_view item = s.substr(0, comma);
    wanted w{};
    if (!take_number(item, w.fd, '/') || !take_number(item, w.bytes, '/') || !take_number(item, w.id.device, '/') ||
        !take_number(item, w.id.inode, '\0')) {
      throw malformed("a chunk is not descriptor/bytes/device/inode");
    }
    list.push_back(w);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }

  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    fail_errno(fmt::format("open_shared_block_token: the exporting process {} {}", pid,
                           errno == ESRCH ? "has exited" : "cannot be opened (pidfd_open)"));
  }
  const unique_fd process{pidfd};
  shared_block b;
  b.device = device_id{device};
  b.offset = offset;
  b.size = size;
  for (const auto& w : list) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_getfd, process.get(), w.fd, 0));
    if (fd < 0) {
      fail_errno(fmt::format(
          "open_shared_block_token: cannot take descriptor {} of process {} (pidfd_getfd{})", w.fd, pid,
          errno == EPERM ? ": not permitted; the same user is needed, and under Yama's ptrace_scope 1 the exporter "
                           "must allow it (prctl PR_SET_PTRACER); or send the block over a Unix socket"
          : errno == EBADF ? ": it is closed there: the block is no longer exported"
                           : ""));
    }
    unique_fd taken{fd};
    const file_identity now = identity_of(taken.get());
    if (now.device != w.id.device || now.inode != w.id.inode) {
      throw std::system_error{ESTALE, std::generic_category(),
                              fmt::format("open_shared_block_token: descriptor {} of process {} is another file now: "
                                          "the block is no longer exported",
                                          w.fd, pid)};
    }
    b.chunks.push_back(shared_chunk{std::move(taken), w.bytes});
  }
  b.validate();
  return b;
}

bool allow_token_imports() noexcept { return ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0; }

}  // namespace mgm

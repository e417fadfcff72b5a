// Pooled blocks shared between processes: export from a pool over shareable simulated memory
// (memfd-backed), import mapped elsewhere, in this process and in a second one, over a Unix
// socket and as a token; and every malformed input refused with the reason.
#include <mgm/error.hpp>
#include <mgm/pool/caching_pool.hpp>
#include <mgm/pool/imported_block.hpp>
#include <mgm/pool/shared_block.hpp>
#include <mgm/sim/judged.hpp>
#include <mgm/sim/machine.hpp>

#include "test_artifacts.hpp"
#include "sizes.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

extern char** environ;

using mgm::device_id;

namespace {
const mgm::stream_ref default_stream{};

mgm::pool_options small_chunks() {
  mgm::pool_options o;
  o.expandable_segments = true;
  o.map_chunk_bytes = 4 * MiB;  // blocks of more than 4 MiB span several chunks
  return o;
}

void fill_pattern(void* p, std::size_t n) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>((i * 7 + 1) & 0xff);
}

bool all_bytes(const void* p, std::size_t n, unsigned char v) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    if (b[i] != v) return false;
  }
  return true;
}

// The second process (tests/ipc_child.cpp), with its exit status and what it printed (stdout and
// stderr). It takes this process's descriptors for a token: under Yama's ptrace_scope 1 a child
// may do so only with its parent's consent, which the exporter gives (as the C ABI does).
struct child_result {
  int status{-1};
  std::string out;
};
child_result run_child(const std::vector<std::string>& args, int keep_fd = -1) {
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, out[1], 2);
  if (keep_fd >= 0) posix_spawn_file_actions_adddup2(&fa, keep_fd, keep_fd);  // clears close-on-exec
  const std::string path = mgm_test::artifact(MGM_IPC_CHILD);
  std::vector<char*> argv{const_cast<char*>(path.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, path.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  REQUIRE(rc == 0);
  child_result r;
  char buf[256];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) r.out.append(buf, static_cast<std::size_t>(n));
  ::close(out[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

struct shareable_pool {
  mgm::sim::machine m{mgm::sim::parse_device_list("2x256MiB")};
  mgm::caching_pool<mgm::sim::device_allocator> pool{m.allocator(device_id{1}, mgm::vmm_sharing::shareable), small_chunks()};
};

}  // namespace

TEST_CASE("ipc: an exported block maps elsewhere onto the same memory, uncharged, and both sides let go",
          "[ipc][sim][pool]") {
  shareable_pool f;
  REQUIRE(f.pool.expandable());
  mgm::sim::judged judged{f.m, f.pool};
  // A small block (inside one chunk), and one over several chunks after it.
  void* a = judged.allocate(300 * 1024);
  void* b = judged.allocate(10 * MiB + 4096);
  const std::size_t b_size = 10 * MiB + 4096;
  fill_pattern(b, b_size);
  std::memset(a, 0x11, 300 * 1024);
  const std::size_t used = f.m.memory(device_id{1}).used_bytes;

  const mgm::shared_block sa = f.pool.export_block(a);
  const mgm::shared_block sb = f.pool.export_block(b);
  CHECK(sa.device == device_id{1});
  CHECK(sa.chunks.size() == 1);
  CHECK(sb.chunks.size() >= 3);  // 10 MiB over chunks of at most 4 MiB
  CHECK(sb.size >= b_size);
  for (const auto& c : sb.chunks) CHECK(c.bytes % mgm::sim::vmm_ops::granule_bytes == 0);
  CHECK(sb.offset + sb.size <= sb.mapped_bytes());

  {
    const mgm::imported_block ib{f.m.vmm(mgm::vmm_sharing::shareable), sb};
    REQUIRE(ib.get() != b);  // another mapping ...
    CHECK(std::memcmp(ib.get(), b, b_size) == 0);  // ... of the same pages
    std::memset(ib.get(), 0x5a, b_size);
    CHECK(all_bytes(b, b_size, 0x5a));
    // Importing charges nothing: the exporter's device holds the memory once.
    CHECK(f.m.memory(device_id{1}).used_bytes == used);
    CHECK(f.m.vmm().access(ib.get()) == std::vector<device_id>{device_id{1}});
    const mgm::imported_block ia{f.m.vmm(mgm::vmm_sharing::shareable), sa};
    CHECK(all_bytes(ia.get(), 300 * 1024, 0x11));
  }
  // The importer let go: the exporter's block is untouched and frees as usual.
  CHECK(all_bytes(b, b_size, 0x5a));
  judged.deallocate(a, 300 * 1024);
  judged.deallocate(b, b_size);
  (void)f.pool.release();
  CHECK(f.m.memory(device_id{1}).used_bytes == 0);
  CHECK(f.m.vmm().mapped_bytes(device_id{1}) == 0);
  CHECK(f.m.hazards().empty());
}

TEST_CASE("ipc: memory the exporter released lives on while an importer maps it", "[ipc][sim][pool]") {
  shareable_pool f;
  void* p = f.pool.allocate(6 * MiB);
  fill_pattern(p, 6 * MiB);
  const mgm::shared_block s = f.pool.export_block(p);
  mgm::sim::machine other{mgm::sim::parse_device_list("2x256MiB")};  // as another process's machine
  const mgm::imported_block ib{other.vmm(mgm::vmm_sharing::shareable), s};
  f.pool.deallocate(p, 6 * MiB);
  (void)f.pool.release();  // the exporter unmaps and releases its chunks
  REQUIRE(f.m.vmm().mapped_bytes(device_id{1}) == 0);
  std::vector<unsigned char> expect(6 * MiB);
  fill_pattern(expect.data(), expect.size());
  CHECK(std::memcmp(ib.get(), expect.data(), expect.size()) == 0);
  CHECK(other.memory(device_id{1}).used_bytes == 0);  // charged to nobody in the importer
  CHECK(f.m.hazards().empty());
  CHECK(other.hazards().empty());
}

TEST_CASE("ipc: export refuses what cannot be shared, saying why", "[ipc][sim][pool]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("2x256MiB")};
  SECTION("process-local virtual memory") {
    mgm::caching_pool<mgm::sim::device_allocator> pool{m.allocator(device_id{0}), small_chunks()};
    void* p = pool.allocate(MiB);
    REQUIRE_THROWS_WITH(pool.export_block(p), Catch::Contains("process-local") && Catch::Contains("shareable"));
    pool.deallocate(p, MiB);
  }
  SECTION("a plain segment") {
    mgm::pool_options o = small_chunks();
    o.expandable_segments = false;
    mgm::caching_pool<mgm::sim::device_allocator> pool{m.allocator(device_id{0}, mgm::vmm_sharing::shareable), o};
    void* p = pool.allocate(MiB);
    REQUIRE_THROWS_WITH(pool.export_block(p), Catch::Contains("plain segment"));
    pool.deallocate(p, MiB);
  }
  SECTION("a pointer the pool did not hand out, or already freed") {
    mgm::caching_pool<mgm::sim::device_allocator> pool{m.allocator(device_id{0}, mgm::vmm_sharing::shareable),
                                                       small_chunks()};
    void* p = pool.allocate(MiB);
    REQUIRE_THROWS_WITH(pool.export_block(static_cast<char*>(p) + 256), Catch::Contains("not a live allocation"));
    pool.deallocate(p, MiB);
    REQUIRE_THROWS_WITH(pool.export_block(p), Catch::Contains("not a live allocation"));
  }
  SECTION("process-local physical memory has no descriptor") {
    auto vmm = m.vmm();
    const auto h = vmm.create(device_id{0}, 2 * MiB);
    REQUIRE_THROWS_AS(vmm.export_handle(h), mgm::logic_error);
    vmm.release(h);
  }
  CHECK(m.hazards().empty());
}

TEST_CASE("ipc: import refuses descriptors that are not shareable device memory of whole granules",
          "[ipc][sim]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("2x256MiB")};
  auto vmm = m.vmm(mgm::vmm_sharing::shareable);
  const auto refused = [&](int fd) {
    REQUIRE_THROWS_AS(vmm.import_handle(fd), mgm::cuda_error);
  };
  refused(-1);
  int pipe_fds[2] = {-1, -1};
  REQUIRE(::pipe(pipe_fds) == 0);
  refused(pipe_fds[0]);  // not a memfd
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  const mgm::unique_fd other{::memfd_create("someone-else", MFD_CLOEXEC)};
  REQUIRE(::ftruncate(other.get(), 2 * MiB) == 0);
  refused(other.get());  // a memfd, but not simulated device memory
  const mgm::unique_fd odd{::memfd_create("mgm-sim-device-0", MFD_CLOEXEC)};
  REQUIRE(::ftruncate(odd.get(), 3 * MiB) == 0);
  REQUIRE_THROWS_WITH(vmm.import_handle(odd.get()), Catch::Contains("2 MiB granule"));
  const mgm::unique_fd far{::memfd_create("mgm-sim-device-7", MFD_CLOEXEC)};
  REQUIRE(::ftruncate(far.get(), 2 * MiB) == 0);
  REQUIRE_THROWS_WITH(vmm.import_handle(far.get()), Catch::Contains("device 7"));
  // A block that does not lie inside its chunks, or has none.
  mgm::shared_block bad;
  REQUIRE_THROWS_WITH(bad.validate(), Catch::Contains("no chunks"));
  bad.chunks.push_back(mgm::shared_chunk{mgm::unique_fd{::memfd_create("mgm-sim-device-0", MFD_CLOEXEC)}, 2 * MiB});
  bad.size = MiB;
  bad.offset = 1536 * 1024;
  REQUIRE_THROWS_WITH(bad.validate(), Catch::Contains("does not lie inside"));
  REQUIRE_THROWS_AS((mgm::imported_block{vmm, bad}), mgm::logic_error);
  bad.chunks.push_back(mgm::shared_chunk{mgm::unique_fd{::memfd_create("mgm-sim-device-0", MFD_CLOEXEC)}, SIZE_MAX - MiB});
  REQUIRE_THROWS_WITH(bad.validate(), Catch::Contains("overflow"));
  CHECK(m.vmm().mapped_bytes(device_id{0}) == 0);
}

TEST_CASE("ipc: a failed import leaves nothing mapped and breaks no rule", "[ipc][sim]") {
  shareable_pool f;
  void* p = f.pool.allocate(10 * MiB);
  mgm::shared_block s = f.pool.export_block(p);
  REQUIRE(s.chunks.size() >= 2);
  // The last chunk's descriptor replaced by one the importer refuses.
  const mgm::unique_fd wrong{::memfd_create("not-ours", MFD_CLOEXEC)};
  REQUIRE(::ftruncate(wrong.get(), static_cast<off_t>(s.chunks.back().bytes)) == 0);
  s.chunks.back().fd.reset(::fcntl(wrong.get(), F_DUPFD_CLOEXEC, 0));
  mgm::sim::machine other{mgm::sim::parse_device_list("2x256MiB")};
  REQUIRE_THROWS_AS((mgm::imported_block{other.vmm(mgm::vmm_sharing::shareable), s}), mgm::cuda_error);
  CHECK(other.vmm().mapped_bytes(device_id{1}) == 0);
  CHECK(other.hazards().empty());
  f.pool.deallocate(p, 10 * MiB);
}

TEST_CASE("ipc: a block over more chunks than one message carries crosses a socket whole", "[ipc][sim][pool]") {
  mgm::sim::machine m{mgm::sim::parse_device_list("1x1GiB")};
  mgm::pool_options o = small_chunks();
  o.map_chunk_bytes = 2 * MiB;
  mgm::caching_pool<mgm::sim::device_allocator> pool{m.allocator(device_id{0}, mgm::vmm_sharing::shareable), o};
  const std::size_t bytes = 600 * MiB;  // 300 chunks of 2 MiB
  void* p = pool.allocate(bytes);
  const mgm::shared_block s = pool.export_block(p);
  REQUIRE(s.chunks.size() == 300);
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
  const mgm::unique_fd left{sv[0]}, right{sv[1]};
  mgm::send_shared_block(left.get(), s);
  const mgm::shared_block got = mgm::receive_shared_block(right.get());
  CHECK(got.chunks.size() == 300);
  CHECK(got.offset == s.offset);
  CHECK(got.size == s.size);
  CHECK(got.mapped_bytes() == s.mapped_bytes());
  static_cast<unsigned char*>(p)[bytes - 1] = 0x77;
  const mgm::imported_block ib{m.vmm(mgm::vmm_sharing::shareable), got};
  CHECK(static_cast<unsigned char*>(ib.get())[bytes - 1] == 0x77);
  // Not a shared block: refused, and the socket stays usable.
  REQUIRE(::write(left.get(), "hello", 5) == 5);
  REQUIRE_THROWS_WITH(mgm::receive_shared_block(right.get()), Catch::Contains("not a shared block"));
  pool.deallocate(p, bytes);
  CHECK(m.hazards().empty());
}

TEST_CASE("ipc: tokens are checked before any descriptor is taken", "[ipc]") {
  REQUIRE_THROWS_WITH(mgm::open_shared_block_token("hello"), Catch::Contains("mgm-ipc1:"));
  REQUIRE_THROWS_WITH(mgm::open_shared_block_token("mgm-ipc1:12:0:0"), Catch::Contains("pid, device, offset or size"));
  REQUIRE_THROWS_WITH(mgm::open_shared_block_token("mgm-ipc1:12:0:0:4096:"), Catch::Contains("descriptor/bytes"));
  REQUIRE_THROWS_WITH(mgm::open_shared_block_token("mgm-ipc1:12:0:0:4096:5/x"), Catch::Contains("descriptor/bytes"));
  REQUIRE_THROWS_WITH(mgm::open_shared_block_token("mgm-ipc1:12:0:0:4096:5/2097152"),
                      Catch::Contains("descriptor/bytes/device/inode"));  // no file identity
  REQUIRE_THROWS_WITH(mgm::open_shared_block_token("mgm-ipc1:12:-3:0:4096:5/2097152/1/2"),
                      Catch::Contains("pid, device, offset or size"));  // no signs
  REQUIRE_THROWS_WITH(mgm::open_shared_block_token("mgm-ipc1:12:0:0:4096:5/2097152/1/2,"),
                      Catch::Contains("descriptor/bytes/device/inode"));  // an empty last chunk
  REQUIRE_THROWS_WITH(mgm::open_shared_block_token("mgm-ipc1:12:0:0:4096:-5/2097152/1/2"),
                      Catch::Contains("descriptor/bytes/device/inode"));
  // A process that does not exist.
  REQUIRE_THROWS_WITH(mgm::open_shared_block_token("mgm-ipc1:999999999:0:0:4096:5/2097152/1/2"),
                      Catch::Contains("has exited"));
}

TEST_CASE("ipc: a token whose descriptors were closed, their numbers reused, is refused", "[ipc][sim][pool]") {
  shareable_pool f;
  void* a = f.pool.allocate(2 * MiB);
  void* b = f.pool.allocate(2 * MiB + 4096);  // another chunk
  std::memset(b, 0xbb, 2 * MiB);
  std::string stale;
  {
    const mgm::shared_block sa = f.pool.export_block(a);
    stale = mgm::shared_block_token(sa);
    const mgm::shared_block same = mgm::open_shared_block_token(stale);  // while open: this process's own files
    CHECK(same.chunks.size() == sa.chunks.size());
  }  // a's descriptors closed
  const mgm::shared_block sb = f.pool.export_block(b);  // the same numbers, other files
  REQUIRE_THROWS_WITH(mgm::open_shared_block_token(stale), Catch::Contains("no longer exported"));
  f.pool.deallocate(a, 2 * MiB);
  f.pool.deallocate(b, 2 * MiB + 4096);
}

TEST_CASE("ipc: two processes share a pooled block, over a Unix socket and as a token", "[ipc][sim][pool]") {
  shareable_pool f;
  mgm::sim::judged judged{f.m, f.pool};
  const std::size_t bytes = 9 * MiB + 512;
  void* p = judged.allocate(bytes);
  fill_pattern(p, bytes);
  const mgm::shared_block s = f.pool.export_block(p);

  SECTION("over a socket") {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    const mgm::unique_fd mine{sv[0]}, theirs{sv[1]};
    mgm::send_shared_block(mine.get(), s);
    const auto r = run_child({"socket", std::to_string(theirs.get()), "2x256MiB"}, theirs.get());
    INFO(r.out);
    REQUIRE(r.status == 0);
    char answer[2] = {};
    REQUIRE(::read(mine.get(), answer, 2) == 2);
    CHECK(std::string{answer, 2} == "ok");
  }
  SECTION("as a token, the descriptors taken from this process") {
    (void)mgm::allow_token_imports();
    const std::string token = mgm::shared_block_token(s);
    CHECK(token.starts_with("mgm-ipc1:" + std::to_string(::getpid()) + ":1:"));
    const auto r = run_child({"token", token, "2x256MiB"});
    INFO(r.out);
    REQUIRE(r.status == 0);
    CHECK(r.out == "ok\n");
  }
  // What the other process wrote is here.
  CHECK(all_bytes(p, bytes, 0x5a));
  judged.deallocate(p, bytes);
  CHECK(f.m.hazards().empty());
}

TEST_CASE("ipc: the second process refuses a machine without the block's device", "[ipc][sim][pool]") {
  shareable_pool f;  // the block is on device 1
  void* p = f.pool.allocate(2 * MiB);
  fill_pattern(p, 2 * MiB);
  const mgm::shared_block s = f.pool.export_block(p);
  (void)mgm::allow_token_imports();
  const auto r = run_child({"token", mgm::shared_block_token(s), "1x256MiB"});
  INFO(r.out);
  CHECK(r.status == 1);
  CHECK(r.out.find("device 1") != std::string::npos);  // refused for the device, not anything else
  CHECK(r.out.find("pidfd_getfd") == std::string::npos);
  f.pool.deallocate(p, 2 * MiB);
}

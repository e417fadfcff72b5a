// The second process of the IPC tests: imports a pooled block another process exported, on a
// simulated machine of its own, checks what the exporter wrote, and writes its answer.
//
//   mgm_test_ipc_child socket FD MACHINE    the block arrives over Unix socket FD (send_shared_block)
//   mgm_test_ipc_child token TOKEN MACHINE  the block is named by a token (shared_block_token)
//
// The exporter filled the block with byte (i * 7 + 1) & 0xff at offset i; the child checks every
// byte, then fills the block with 0x5a and answers "ok" (socket mode: on the socket; token mode: on
// stdout). Exit 0 when all went well, 1 with the reason on stderr.
#include <mgm/concepts.hpp>
#include <mgm/pool/imported_block.hpp>
#include <mgm/pool/shared_block.hpp>
#include <mgm/sim/machine.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s socket FD MACHINE | token TOKEN MACHINE\n", argv[0]);
    return 2;
  }
  try {
    const std::string mode = argv[1];
    const int socket = mode == "socket" ? std::stoi(argv[2]) : -1;
    const mgm::shared_block block =
        mode == "socket" ? mgm::receive_shared_block(socket) : mgm::open_shared_block_token(argv[2]);
    mgm::sim::machine machine = mgm::sim::machine::from_string(argv[3]);
    const mgm::imported_block imported{machine.vmm(mgm::vmm_sharing::shareable), block};
    auto* bytes = static_cast<unsigned char*>(imported.get());
    for (std::size_t i = 0; i < imported.size(); ++i) {
      if (bytes[i] != static_cast<unsigned char>((i * 7 + 1) & 0xff)) {
        std::fprintf(stderr, "ipc child: byte %zu of %zu is %u, not what the exporter wrote\n", i, imported.size(),
                     unsigned{bytes[i]});
        return 1;
      }
    }
    std::memset(bytes, 0x5a, imported.size());
    if (!machine.hazards().empty()) {
      std::fprintf(stderr, "ipc child: the judge found %zu hazard(s): %s\n", machine.hazards().size(),
                   machine.hazards().front().message.c_str());
      return 1;
    }
    if (mode == "socket") {
      if (::write(socket, "ok", 2) != 2) return 1;
    } else {
      std::fputs("ok\n", stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ipc child: %s\n", e.what());
    return 1;
  }
}

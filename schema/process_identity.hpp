// Who a process is on this machine, in as much detail as telling a live
// lease holder from a dead one needs (schema/migrations/0009_*.sql): a pid
// alone is not enough where pids are reused, where a killed process lingers
// unreaped (a zombie), or where the pid counts in a container's PID
// namespace (pid 1 there is some other process out here).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace midtune {

struct ProcessIdentity {
  std::string host;
  std::int64_t pid = 0;  // as the process itself sees it (getpid())
  // Unknown (nullopt) where /proc cannot be read, and in leases written
  // before schema version 9.
  std::optional<std::int64_t> start_ticks;   // /proc/PID/stat field 22
  std::optional<std::string> boot_id;        // /proc/sys/kernel/random/boot_id
  std::optional<std::string> pid_namespace;  // readlink /proc/self/ns/pid, "pid:[4026531836]"
};

// This process.
ProcessIdentity this_process();

// True only when `holder` provably no longer runs: it was on this host and
// its pid is gone, a zombie, or another process's (another start time);
// or it lived in another PID namespace and no process visible here is it
// (that namespace is gone, or it is one this process cannot see into; but
// never the initial namespace, which holds this process's own container);
// or this machine has booted since its last heartbeat. Anything else (another
// host, a /proc that does not show every process) is left to the heartbeat.
bool holder_gone(const ProcessIdentity& holder, double heartbeat_age_seconds);

}  // namespace midtune

#include "schema/process_identity.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace midtune {

namespace {

// The initial PID namespace has this fixed inode (PROC_PID_INIT_INO): every
// process on the machine lives in it or in a namespace below it.
constexpr const char* kInitialPidNamespace = "pid:[4026531836]";

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

std::optional<std::string> read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line) || line.empty()) return std::nullopt;
  return line;
}

// /proc/PID/stat: "pid (comm) state ppid ...": the pid, the state letter
// and field 22 (starttime); comm may hold spaces and parentheses, so the
// fields are counted from the last ')'.
struct ProcStat {
  std::int64_t pid = 0;
  char state = '?';
  std::int64_t start_ticks = 0;
};

std::optional<ProcStat> read_stat(const std::string& proc_dir) {
  const std::optional<std::string> line = read_line(proc_dir + "/stat");
  if (!line) return std::nullopt;
  const auto close = line->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  ProcStat stat;
  stat.pid = std::atoll(line->c_str());
  std::istringstream fields(line->substr(close + 1));
  std::string field;
  for (int number = 3; fields >> field; ++number) {
    if (number == 3) stat.state = field[0];
    if (number == 22) {
      stat.start_ticks = std::atoll(field.c_str());
      return stat;
    }
  }
  return std::nullopt;
}

std::optional<std::string> read_link(const std::string& path) {
  std::error_code error;
  const auto target = std::filesystem::read_symlink(path, error);
  if (error) return std::nullopt;
  return target.string();
}

// The last pid of /proc/PID/status's "NSpid:" line: the pid as the process
// sees it in its own (innermost) namespace.
std::optional<std::int64_t> innermost_pid(const std::string& proc_dir) {
  std::ifstream in(proc_dir + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream pids(line.substr(6));
    std::int64_t pid = 0, last = -1;
    while (pids >> pid) last = pid;
    if (last < 0) return std::nullopt;
    return last;
  }
  return std::nullopt;
}

// A zombie (Z) or a process being torn down (X) runs no more code.
bool exited(char state) { return state == 'Z' || state == 'X'; }

// /proc is mounted for this process's PID namespace (its pids are ours).
bool proc_is_ours() {
  const auto self = read_stat("/proc/self");
  return self && self->pid == getpid();
}

double uptime_seconds() {
  const auto line = read_line("/proc/uptime");
  return line ? std::atof(line->c_str()) : 0.0;
}

bool pid_gone(std::int64_t pid) { return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

// A holder in this process's PID namespace (or one of unknown namespace,
// as leases before schema 9 are).
bool gone_here(const ProcessIdentity& holder) {
  if (!proc_is_ours()) return pid_gone(holder.pid);
  const auto stat = read_stat("/proc/" + std::to_string(holder.pid));
  if (!stat) return pid_gone(holder.pid);  // no such process, or /proc hides it
  if (exited(stat->state)) return true;
  return holder.start_ticks && stat->start_ticks != *holder.start_ticks;
}

// A holder in another PID namespace: found among the processes /proc shows
// by its start time and its pid in its own namespace.
bool gone_elsewhere(const ProcessIdentity& holder) {
  // A /proc that hides other users' processes (hidepid) cannot show that
  // the holder is absent.
  if (!holder.start_ticks || !read_stat("/proc/1")) return false;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto stat = read_stat(entry.path().string());
    if (!stat || stat->start_ticks != *holder.start_ticks) continue;
    if (innermost_pid(entry.path().string()) == holder.pid) return exited(stat->state);
  }
  if (error) return false;
  // Not visible from here. The initial namespace encloses every other one,
  // this process's included, so it still exists and, when this process runs
  // in a container, holds processes it cannot see: undecided. Any other
  // namespace is gone (its last process died), or a sibling container this
  // process cannot see into; a holder there that still runs stops at its
  // next commit (LeaseLost), so nothing stored is lost.
  return holder.pid_namespace != kInitialPidNamespace;
}

}  // namespace

ProcessIdentity this_process() {
  ProcessIdentity me;
  me.host = host_name();
  me.pid = getpid();
  if (const auto stat = read_stat("/proc/self")) me.start_ticks = stat->start_ticks;
  me.boot_id = read_line("/proc/sys/kernel/random/boot_id");
  me.pid_namespace = read_link("/proc/self/ns/pid");
  return me;
}

bool holder_gone(const ProcessIdentity& holder, double heartbeat_age_seconds) {
  const ProcessIdentity me = this_process();
  if (holder.host != me.host || holder.pid <= 0 || holder.pid > INT_MAX) return false;
  if (holder.boot_id && me.boot_id && *holder.boot_id != *me.boot_id)
    // Rebooted since the last heartbeat. A heartbeat younger than this boot
    // comes from another machine that has the same name.
    return heartbeat_age_seconds > uptime_seconds();
  if (!holder.pid_namespace || !me.pid_namespace || *holder.pid_namespace == *me.pid_namespace)
    return gone_here(holder);
  return gone_elsewhere(holder);
}

}  // namespace midtune

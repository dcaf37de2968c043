#include "core/cli/status_command.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "core/cli/table.hpp"
#include "schema/sqlite.hpp"

namespace midtune::cli {

namespace {

// "host pid" of an unfinished run: false when it ran on this host and the
// process is gone (killed), so a fresh heartbeat does not read as running.
bool process_alive(const std::string& host_pid) {
  const auto space = host_pid.rfind(' ');
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  if (space == std::string::npos || host_pid.substr(0, space) != host) return true;  // cannot tell
  const pid_t pid = static_cast<pid_t>(std::stol(host_pid.substr(space + 1)));
  return kill(pid, 0) == 0 || errno != ESRCH;
}

}  // namespace

int print_status(const std::string& db_path, std::ostream& out, std::ostream& err) {
  if (!std::filesystem::is_regular_file(db_path)) {
    err << "ga-run status: " << db_path << ": no such database file\n";
    return 1;
  }
  try {
    sql::Database db(db_path, sql::Database::Mode::read_only);
    auto totals = db.prepare(
        "SELECT (SELECT count(*) FROM evaluations WHERE status = 'ok'), "
        "(SELECT count(*) FROM evaluations WHERE status = 'failed'), (SELECT count(*) FROM sample_results)");
    totals.step();
    out << db_path << ": schema v" << db.user_version() << ", " << totals.column_int64(0) << " evaluations cached ("
        << totals.column_int64(1) << " failed), " << totals.column_int64(2) << " sample results\n";
    // A run is "running" if its heartbeat moved in the last 60 s and it has not finished.
    auto s = db.prepare(R"sql(
      SELECT e.name,
        (SELECT count(*) FROM generations g WHERE g.experiment_id = e.id),
        (SELECT count(*) FROM individuals i WHERE i.experiment_id = e.id),
        (SELECT count(*) FROM individuals i WHERE i.experiment_id = e.id AND i.cache_hit = 0),
        (SELECT count(*) FROM individuals i WHERE i.experiment_id = e.id AND i.cache_hit = 1),
        (SELECT max(fitness) FROM individuals i WHERE i.experiment_id = e.id),
        (SELECT sum(prompts) FROM runs r WHERE r.experiment_id = e.id),
        (SELECT sum(backend_seconds) FROM runs r WHERE r.experiment_id = e.id),
        (SELECT count(*) FROM runs r WHERE r.experiment_id = e.id),
        (SELECT CASE WHEN r.finished_at IS NOT NULL THEN 'complete'
                     WHEN julianday('now') - julianday(r.heartbeat_at) < 60.0 / 86400 THEN 'running'
                     ELSE 'stopped' END || ' (' || r.host || ' pid ' || r.pid || ', heartbeat ' || r.heartbeat_at || ')'
         FROM runs r WHERE r.experiment_id = e.id ORDER BY r.id DESC LIMIT 1),
        (SELECT r.host || ' ' || r.pid FROM runs r WHERE r.experiment_id = e.id AND r.finished_at IS NULL
         ORDER BY r.id DESC LIMIT 1)
      FROM experiments e ORDER BY e.id)sql");
    std::vector<Row> rows;
    while (s.step()) {
      const double prompts = s.column_double(6), seconds = s.column_double(7);
      std::string last_run = s.is_null(9) ? "never run" : s.column_text(9);
      if (!s.is_null(10) && last_run.rfind("running", 0) == 0 && !process_alive(s.column_text(10)))
        last_run.replace(0, 7, "stopped");
      rows.push_back({s.column_text(0), s.column_text(1), s.column_text(2), s.column_text(3), s.column_text(4),
                      s.is_null(5) ? "-" : format_number(s.column_double(5)),
                      seconds > 0 ? format_number(prompts / seconds, 1) : "-", s.column_text(8), last_run});
    }
    print_table(out,
                {"experiment", "generations done", "individuals", "evaluated", "saved by cache", "best fitness",
                 "prompts/s", "runs", "last run"},
                rows);
    return 0;
  } catch (const std::exception& e) {
    err << "ga-run status: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace midtune::cli

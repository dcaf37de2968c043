#include "schema/sqlite.hpp"

#include <sys/stat.h>

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <thread>

namespace midtune::sql {

namespace {

std::atomic<const std::atomic<int>*> stop_flag{nullptr};

bool stop_requested() {
  const std::atomic<int>* flag = stop_flag.load();
  return flag != nullptr && flag->load() != 0;
}

// SQLite's busy handler: waits in steps of a few milliseconds, so that a
// stop request is seen at once, up to kBusyTimeoutMs in all.
int wait_for_lock(void*, int waits_so_far) {
  constexpr int kStepMs = 5;
  if (stop_requested() || waits_so_far * kStepMs >= kBusyTimeoutMs) return 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(kStepMs));
  return 1;
}

// What a user can do about the errors that come from the file system, not
// from midtune's SQL; "" for the others.
std::string remedy(int code) {
  switch (code & 0xff) {
    case SQLITE_FULL:
      return "the disk (or the user's quota) is full: free space and run the same command; every commit before "
             "this one is kept";
    case SQLITE_READONLY:
      return "the file cannot be written here (a read-only file system, a read-only or immutable file, or a "
             "folder this user may not write): status, report and query can still read it";
    case SQLITE_CANTOPEN:
      return "the file or its folder cannot be opened for writing (a read-only file system, or missing "
             "permissions on the folder)";
    case SQLITE_IOERR:
      return "the operating system refused a read or write of the file (a full or failing disk, a network file "
             "system that went away)";
    default:
      return "";
  }
}

[[noreturn]] void throw_sql(const std::string& message, int code) {
  if ((code & 0xff) == SQLITE_BUSY && stop_requested())
    throw WaitStopped(message + "\n  (the wait for another process's lock on the file was stopped by a signal)",
                      code);
  const std::string advice = remedy(code);
  throw SqlError(advice.empty() ? message : message + "\n  " + advice, code);
}

sqlite3* open_connection(const std::string& path, int flags, const std::string& name_for_errors) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    throw SqlError(name_for_errors + ": cannot open database: " + message);
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_handler(db, wait_for_lock, nullptr);
  return db;
}

// Reads the schema; returns SQLite's (extended) result code.
int touch_schema(sqlite3* db) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master", -1, &stmt, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  sqlite3_finalize(stmt);
  return rc == SQLITE_ROW ? SQLITE_OK : rc;
}

// `file:` URI of a path, percent-encoding what a URI would read otherwise.
std::string file_uri(const std::string& path, const std::string& query) {
  static const char* hex = "0123456789ABCDEF";
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_' || c == '~') {
      uri += static_cast<char>(c);
    } else {
      uri += '%';
      uri += hex[c >> 4];
      uri += hex[c & 15];
    }
  }
  return uri + "?" + query;
}

bool non_empty_file(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error) && std::filesystem::file_size(path, error) > 0;
}

}  // namespace

Database::Database(const std::string& path, Mode mode) : path_(path), read_only_(mode == Mode::read_only) {
  // Before SQLite opens it: opening a FIFO blocks until a writer appears,
  // a device or a directory gives misleading errors (or a "-journal" beside
  // /dev/null).
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    const char* what = S_ISDIR(st.st_mode)                          ? "a directory"
                       : S_ISFIFO(st.st_mode)                       ? "a FIFO (named pipe)"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                       : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                                    : "a special file";
    throw SqlError(path + ": is " + std::string(what) + ", not a results database file", SQLITE_CANTOPEN);
  }
  if (mode == Mode::read_only && exists && st.st_uid != ::geteuid() && !std::filesystem::exists(path + "-wal")) {
    // Another user's file with no write-ahead log: no connection is open on
    // it now. A plain read-only connection would create a log and its index
    // beside it, owned by this user, that the owner's runs could not open
    // afterwards ("attempt to write a readonly database"); reading it as
    // immutable leaves nothing behind.
    open_immutable(path);
    return;
  }
  if (mode == Mode::read_only) {
    const std::string folder = std::filesystem::absolute(path).parent_path().string();
    const bool folder_writable = access(folder.c_str(), W_OK) == 0;
    int opened = SQLITE_OK;
    // In a writable directory SQLITE_CANTOPEN and SQLITE_READONLY with no
    // commits in a log are passing: the last connection closing removes the
    // log, then its index, and a reader in between finds one without the
    // other. A few tries, milliseconds apart, see the files settled.
    const bool log_before = std::filesystem::exists(path + "-wal");
    const bool index_before = std::filesystem::exists(path + "-shm");
    for (int attempt = 0; attempt < 5; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10 * attempt));
      db_ = open_connection(path, SQLITE_OPEN_READONLY, path);
      opened = touch_schema(db_) & 0xff;
      if (opened == SQLITE_IOERR && !log_before) {
        // The index beside the file could not be written (a full disk): no
        // log was there, so no connection is open on the file; what this
        // attempt created goes, and the file is read as it is.
        sqlite3_close_v2(db_);
        std::error_code error;
        if (!non_empty_file(path + "-wal")) std::filesystem::remove(path + "-wal", error);
        if (!index_before) std::filesystem::remove(path + "-shm", error);
        open_immutable(path);
        return;
      }
      if (opened != SQLITE_READONLY && opened != SQLITE_CANTOPEN) return;
      if (!folder_writable || non_empty_file(path + "-wal")) break;
      sqlite3_close_v2(db_);
      db_ = nullptr;
    }
    if (opened == SQLITE_CANTOPEN && folder_writable) {
      // Still no index to open: as before, the next statement tries again.
      db_ = open_connection(path, SQLITE_OPEN_READONLY, path);
      return;
    }
    // A read-only connection to a WAL file must write the shared-memory
    // index beside it, and rebuild it after a writer was killed
    // (SQLITE_READONLY_RECOVERY); it cannot do either in a directory it may
    // not write, nor create an index that is not there (SQLITE_CANTOPEN: a
    // log left without its index).
    sqlite3_close_v2(db_);  // a no-op when the tries above closed it
    db_ = nullptr;
    if (non_empty_file(path + "-wal")) {
      // Commits still in the log: a read-write connection that only reads
      // the schema replays them into the index (nothing else changes);
      // then the read-only connection is opened again.
      int rc = SQLITE_CANTOPEN;
      try {
        sqlite3* recover = open_connection(path, SQLITE_OPEN_READWRITE, path);
        rc = touch_schema(recover);
        sqlite3_close_v2(recover);
      } catch (const SqlError&) {
        // The file itself is not writable here: said below.
      }
      if ((rc & 0xff) == SQLITE_READONLY || (rc & 0xff) == SQLITE_CANTOPEN)
        throw SqlError(path + ": cannot read the database: its write-ahead log " + path +
                           "-wal holds commits that are not in the file yet, and replaying them needs write access "
                           "to the directory; copy both files to a directory you can write",
                       rc);
      db_ = open_connection(path, SQLITE_OPEN_READONLY, path);
      return;
    }
    if (folder_writable)
      throw SqlError(path + ": cannot read the database read-only (the write-ahead log's index beside it is not "
                     "writable)", SQLITE_READONLY);
    // A directory nobody here may write, and no log: every commit is in the
    // file and no writer can be active in that directory, so reading the
    // file as immutable (no locks, no index) reads exactly what it holds.
    open_immutable(path);
    return;
  }
  db_ = open_connection(path, SQLITE_OPEN_READWRITE | (mode == Mode::read_write_create ? SQLITE_OPEN_CREATE : 0), path);
  // Connection settings only; neither changes the file.
  exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;");
}

void Database::use_wal() {
  // The switch needs the file to itself. When another process holds a lock
  // SQLite may answer SQLITE_BUSY at once instead of calling the busy
  // handler (escalating a read lock could deadlock), so many processes that
  // open one new file together retry here, up to the busy timeout.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
  for (int attempt = 0;; ++attempt) {
    try {
      {
        Statement current(*this, "PRAGMA journal_mode");  // finalized before the switch: no open read
        if (current.step() && current.column_text(0) == "wal") return;
      }
      Statement change(*this, "PRAGMA journal_mode=WAL");
      if (!change.step() || change.column_text(0) != "wal")
        throw SqlError(path_ + ": cannot switch the database to write-ahead logging (journal_mode stays '" +
                       change.column_text(0) + "')");
      return;
    } catch (const SqlError& e) {
      if ((e.code & 0xFF) != SQLITE_BUSY || stop_requested() || std::chrono::steady_clock::now() >= deadline) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5 * (attempt + 1), 100)));
    }
  }
}

namespace {

// A read-only connection to a WAL file creates the log and its index
// (-wal, -shm) and cannot delete them when it closes; a read-write one
// deletes both when it closes as the last connection (SQLite takes an
// exclusive lock to know). With an empty log it has nothing to copy into the
// file, so this writes nothing to the database itself. Best effort: where it
// cannot open the file read-write, or another connection is open, the files
// stay for SQLite to handle.
void remove_empty_log(const std::string& path) {
  std::error_code error;
  const bool log = std::filesystem::exists(path + "-wal", error);
  const bool index = std::filesystem::exists(path + "-shm", error);
  if (!log && !index) return;
  if (log && std::filesystem::file_size(path + "-wal", error) != 0) return;  // commits to keep
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK && !sqlite3_db_readonly(db, "main")) {
    sqlite3_busy_timeout(db, 0);  // tidying never waits on other connections
    touch_schema(db);             // opens the log, so closing removes it
  }
  sqlite3_close_v2(db);
}

int stop_at_deadline(void* database) {
  auto* self = static_cast<Database*>(database);
  return self->deadline_reached() ? 1 : 0;
}

}  // namespace

Database::~Database() {
  cache_.clear();
  sqlite3_close_v2(db_);
  if (read_only_ && !immutable_) remove_empty_log(path_);
}

void Database::set_deadline(std::optional<std::chrono::steady_clock::time_point> deadline) {
  deadline_ = deadline;
  deadline_passed_ = false;
  // Called every 1000 virtual-machine instructions: microseconds apart, so a
  // statement stops within a millisecond of the deadline at a negligible cost.
  sqlite3_progress_handler(db_, deadline ? 1000 : 0, deadline ? stop_at_deadline : nullptr, this);
}

bool Database::deadline_reached() {
  if (deadline_ && std::chrono::steady_clock::now() >= *deadline_) deadline_passed_ = true;
  return deadline_passed_;
}

void stop_waits_on(const std::atomic<int>* flag) { stop_flag = flag; }

// Reads the file as it is: no locks, no log or index beside it. Only where
// no other connection can be writing it (see the callers).
void Database::open_immutable(const std::string& path) {
  db_ = open_connection(file_uri(path, "immutable=1"), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, path);
  immutable_ = true;
}

void Database::fail(const std::string& sql, const std::string& what) const {
  std::string message = path_ + ": " + what + ": " + sqlite3_errmsg(db_);
  if (!sql.empty()) message += "\n  in SQL: " + sql;
  throw_sql(message, sqlite3_extended_errcode(db_));
}

void Database::exec(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error ? error : sqlite3_errmsg(db_);
    sqlite3_free(error);
    throw_sql(path_ + ": " + message + "\n  in SQL: " + sql, sqlite3_extended_errcode(db_));
  }
}

std::int64_t Database::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
int Database::changes() const { return sqlite3_changes(db_); }

int Database::user_version() {
  Statement s(*this, "PRAGMA user_version");
  s.step();
  return static_cast<int>(s.column_int64(0));
}

std::int64_t Database::application_id() {
  Statement s(*this, "PRAGMA application_id");
  s.step();
  return s.column_int64(0);
}

CachedStatement Database::cached(const std::string& sql) {
  auto found = cache_.find(sql);
  if (found == cache_.end()) found = cache_.emplace(sql, std::make_unique<Kept>(Kept{Statement(*this, sql)})).first;
  Kept& kept = *found->second;
  if (kept.busy) return CachedStatement(Statement(*this, sql));
  return CachedStatement(kept.statement, kept.busy);
}

CachedStatement::~CachedStatement() {
  if (busy_ == nullptr) return;
  statement_->reset();
  *busy_ = false;
}

Statement::Statement(Database& db, const std::string& sql) : db_(&db), sql_(sql) {
  const char* tail = nullptr;
  if (sqlite3_prepare_v2(db.handle(), sql.c_str(), static_cast<int>(sql.size()), &stmt_, &tail) !=
      SQLITE_OK)
    db.fail(sql, "cannot prepare statement");
  if (!stmt_) throw SqlError(db.path() + ": empty SQL statement: '" + sql + "'");
  for (; tail && *tail; ++tail) {
    if (*tail != ' ' && *tail != '\n' && *tail != '\t' && *tail != '\r' && *tail != ';') {
      sqlite3_finalize(stmt_);
      stmt_ = nullptr;
      throw SqlError(db.path() + ": only one SQL statement is allowed here\n  in SQL: " + sql);
    }
  }
}

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(other.stmt_), sql_(std::move(other.sql_)) {
  other.stmt_ = nullptr;
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::fail(const std::string& what) const { db_->fail(sql_, what); }

Statement& Statement::bind(int index, std::int64_t value) {
  if (sqlite3_bind_int64(stmt_, index, value) != SQLITE_OK) fail("cannot bind parameter " + std::to_string(index));
  return *this;
}
Statement& Statement::bind(int index, double value) {
  if (sqlite3_bind_double(stmt_, index, value) != SQLITE_OK) fail("cannot bind parameter " + std::to_string(index));
  return *this;
}
Statement& Statement::bind(int index, const std::string& value) {
  if (sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT) !=
      SQLITE_OK)
    fail("cannot bind parameter " + std::to_string(index));
  return *this;
}
Statement& Statement::bind(int index, std::nullopt_t) {
  if (sqlite3_bind_null(stmt_, index) != SQLITE_OK) fail("cannot bind parameter " + std::to_string(index));
  return *this;
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  fail("statement failed");
}

void Statement::run() {
  while (step()) {
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int Statement::column_count() const { return sqlite3_column_count(stmt_); }
std::string Statement::column_name(int column) const { return sqlite3_column_name(stmt_, column); }
bool Statement::is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
std::int64_t Statement::column_int64(int column) const { return sqlite3_column_int64(stmt_, column); }
double Statement::column_double(int column) const { return sqlite3_column_double(stmt_, column); }
std::string Statement::column_text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  if (!text) return {};
  return std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}
std::optional<double> Statement::column_optional_double(int column) const {
  if (is_null(column)) return std::nullopt;
  return column_double(column);
}
bool Statement::readonly() const { return sqlite3_stmt_readonly(stmt_) != 0; }

Transaction::Transaction(Database& db) : db_(db) { db_.cached("BEGIN IMMEDIATE")->run(); }

Transaction::~Transaction() {
  if (!open_) return;
  try {
    db_.exec("ROLLBACK");
  } catch (...) {
    // The connection is already in error; nothing more to undo.
  }
}

void Transaction::commit() {
  db_.cached("COMMIT")->run();
  open_ = false;
}

}  // namespace midtune::sql

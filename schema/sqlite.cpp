#include "schema/sqlite.hpp"

#include <sqlite3.h>

namespace midtune::sql {

namespace {

sqlite3* open_connection(const std::string& path, int flags) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    throw SqlError(path + ": cannot open database: " + message);
  }
  sqlite3_extended_result_codes(db, 1);
  // Another process (a second ga-run, a user's query) may hold the lock briefly.
  sqlite3_busy_timeout(db, 10000);
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

}  // namespace

Database::Database(const std::string& path, Mode mode) : path_(path) {
  if (mode == Mode::read_only) {
    db_ = open_connection(path, SQLITE_OPEN_READONLY);
    // A process killed mid-run leaves a WAL whose index must be rebuilt
    // before anyone can read it, which a read-only connection may not do
    // (SQLITE_READONLY_RECOVERY). A read-write connection that only reads
    // the schema performs the recovery (it replays committed transactions,
    // nothing else); then the read-only connection is opened again.
    if ((touch_schema(db_) & 0xff) == SQLITE_READONLY) {
      sqlite3_close_v2(db_);
      db_ = nullptr;
      sqlite3* recover = open_connection(path, SQLITE_OPEN_READWRITE);
      touch_schema(recover);
      sqlite3_close_v2(recover);
      db_ = open_connection(path, SQLITE_OPEN_READONLY);
    }
    return;
  }
  db_ = open_connection(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  // WAL: readers never block the writer; NORMAL sync is durable across a
  // killed process (only power loss can drop the last commits).
  exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;");
}

Database::~Database() { sqlite3_close_v2(db_); }

void Database::fail(const std::string& sql, const std::string& what) const {
  std::string message = path_ + ": " + what + ": " + sqlite3_errmsg(db_);
  if (!sql.empty()) message += "\n  in SQL: " + sql;
  throw SqlError(message);
}

void Database::exec(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error ? error : sqlite3_errmsg(db_);
    sqlite3_free(error);
    throw SqlError(path_ + ": " + message + "\n  in SQL: " + sql);
  }
}

std::int64_t Database::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }

int Database::user_version() {
  Statement s(*this, "PRAGMA user_version");
  s.step();
  return static_cast<int>(s.column_int64(0));
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

Transaction::Transaction(Database& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
  if (!open_) return;
  try {
    db_.exec("ROLLBACK");
  } catch (...) {
    // The connection is already in error; nothing more to undo.
  }
}

void Transaction::commit() {
  db_.exec("COMMIT");
  open_ = false;
}

}  // namespace midtune::sql

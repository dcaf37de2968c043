// A small RAII wrapper over the sqlite3 C API: a connection, prepared
// statements and transactions. Every error names the database file and the
// SQL that failed, so a message from a user's run says where to look.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>

struct sqlite3;
struct sqlite3_stmt;

namespace midtune::sql {

struct SqlError : std::runtime_error {
  using std::runtime_error::runtime_error;
  SqlError(const std::string& message, int sqlite_code) : std::runtime_error(message), code(sqlite_code) {}
  int code = 0;  // SQLite's extended result code, when SQLite reported the error
};

class Database;

class Statement {
 public:
  Statement(Database& db, const std::string& sql);
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are 1-based, as in SQLite.
  Statement& bind(int index, std::int64_t value);
  Statement& bind(int index, int value) { return bind(index, static_cast<std::int64_t>(value)); }
  Statement& bind(int index, double value);
  Statement& bind(int index, const std::string& value);
  Statement& bind(int index, const char* value) { return bind(index, std::string(value)); }
  Statement& bind(int index, std::nullopt_t);
  template <typename T>
  Statement& bind(int index, const std::optional<T>& value) {
    return value ? bind(index, *value) : bind(index, std::nullopt);
  }
  // Binds every argument in order starting at parameter 1.
  template <typename... Args>
  Statement& bind_all(const Args&... args) {
    int index = 0;
    (bind(++index, args), ...);
    return *this;
  }

  // Advances; true when a row is available.
  bool step();
  // Steps to completion, for statements that return no rows.
  void run();
  void reset();

  int column_count() const;
  std::string column_name(int column) const;
  bool is_null(int column) const;
  std::int64_t column_int64(int column) const;
  double column_double(int column) const;
  std::string column_text(int column) const;
  std::optional<double> column_optional_double(int column) const;
  // sqlite3_stmt_readonly: true if the statement cannot change the database.
  bool readonly() const;
  const std::string& sql() const { return sql_; }

 private:
  [[noreturn]] void fail(const std::string& what) const;
  Database* db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

// A statement from Database::cached(): reset and its bindings cleared when
// it goes out of scope, so the next use finds it fresh and no read stays
// open. Use it like a Statement (->).
class CachedStatement {
 public:
  CachedStatement(Statement& statement, bool& busy) : statement_(&statement), busy_(&busy) { busy = true; }
  explicit CachedStatement(Statement&& own) : own_(std::move(own)), statement_(&*own_) {}
  ~CachedStatement();
  CachedStatement(const CachedStatement&) = delete;
  CachedStatement& operator=(const CachedStatement&) = delete;
  Statement* operator->() { return statement_; }
  Statement& operator*() { return *statement_; }

 private:
  std::optional<Statement> own_;  // the statement was in use: a one-off copy
  Statement* statement_;
  bool* busy_ = nullptr;
};

// Every connection waits this long for another connection's lock before a
// statement fails with "database is locked". Transactions are short (one
// evaluation's rows, one checkpoint, a migration), but many ga-run processes
// writing into one file queue behind each other and a checkpoint of a large
// write-ahead log can take seconds: a minute covers that with a wide margin
// and still fails a lock that is truly stuck.
inline constexpr int kBusyTimeoutMs = 60000;

// A process-wide stop flag the waits for another connection's lock watch:
// once it is non-zero a wait ends within milliseconds and the statement
// throws WaitStopped instead of waiting out kBusyTimeoutMs (a run queued
// behind another process's write answers SIGTERM at once). nullptr: none.
void stop_waits_on(const std::atomic<int>* flag);
// A wait for another connection's lock ended by that flag.
struct WaitStopped : SqlError {
  using SqlError::SqlError;
};

class Database {
 public:
  enum class Mode { read_write_create, read_write, read_only };
  // read_write_create: opens or creates the file; read_write: the file must
  // exist. Both set foreign keys and leave the file as it is: the journal
  // mode changes only through use_wal(). read_only: SQLITE_OPEN_READONLY,
  // the file must exist; in a directory this process cannot write, a WAL
  // file is read immutable (see sqlite.cpp); closing it removes the empty
  // write-ahead log and its index that reading a WAL file leaves beside it,
  // unless another connection still uses them. Every mode sets kBusyTimeoutMs.
  Database(const std::string& path, Mode mode);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Runs one or more statements that return no rows.
  void exec(const std::string& sql);
  Statement prepare(const std::string& sql) { return Statement(*this, sql); }
  // The statement for `sql`, prepared on first use and kept for the
  // connection's life: the per-row statements of a search (one candidate's
  // rows, a heartbeat) are compiled once instead of once per call. While one
  // use of `sql` is still in scope, a nested one gets its own statement.
  CachedStatement cached(const std::string& sql);
  std::int64_t last_insert_rowid() const;
  // Rows the last INSERT, UPDATE or DELETE changed.
  int changes() const;
  int user_version();
  std::int64_t application_id();
  // Switches the file to write-ahead logging (a no-op when it already is):
  // readers never block the writer; NORMAL sync is durable across a killed
  // process (only power loss can drop the last commits).
  void use_wal();
  // Statements running past `deadline` stop with SQLITE_INTERRUPT
  // (sqlite3_progress_handler); nullopt: no deadline.
  void set_deadline(std::optional<std::chrono::steady_clock::time_point> deadline);
  // True once a statement was stopped by the deadline.
  bool deadline_passed() const { return deadline_passed_; }
  // The progress handler's test: true from the deadline on.
  bool deadline_reached();
  // True when opened read-only with immutable=1 (see the constructor).
  bool immutable() const { return immutable_; }
  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }

  // Throws SqlError naming the file, the SQL and SQLite's message.
  [[noreturn]] void fail(const std::string& sql, const std::string& what) const;

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
  bool read_only_ = false;
  void open_immutable(const std::string& path);
  bool immutable_ = false;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  bool deadline_passed_ = false;
  struct Kept {
    Statement statement;
    bool busy = false;
  };
  std::unordered_map<std::string, std::unique_ptr<Kept>> cache_;  // finalized before the connection closes
};

// BEGIN IMMEDIATE on construction; rolls back unless commit() was called.
class Transaction {
 public:
  explicit Transaction(Database& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Database& db_;
  bool open_ = true;
};

}  // namespace midtune::sql

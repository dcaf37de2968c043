// MPI ranks: messages are JSON text (the server protocol's request, reply
// and info) in MPI_CHAR messages, one tag per kind. Every wait polls
// (MPI_Iprobe, MPI_Test) with a short sleep instead of blocking in MPI:
// Open MPI's blocking calls spin, and an evaluator waiting for its next unit
// must not take a core from one that computes.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <span>
#include <thread>

#include "backends/server/evaluation_server.hpp"
#include "backends/server/protocol.hpp"
#include "backends/server/server_backend.hpp"
#include "core/parallel/ranks.hpp"

namespace midtune::parallel {

using nlohmann::json;

bool mpi_built() { return true; }

namespace {

enum Tag : int { kSetup = 1, kHello = 2, kUnit = 3, kReply = 4, kStop = 5 };

// The longest sleep between probes: short while the driver waits for a
// unit's answer (every delay there holds back the next unit), longer for a
// rank waiting at start-up or between evaluations.
constexpr std::chrono::microseconds kUnitWait{100};
constexpr std::chrono::microseconds kIdleWait{250};
// How often the driver, waiting for an answer, looks whether it was asked to
// stop: the units in flight get their grace counted from about then.
constexpr std::chrono::milliseconds kStopCheck{100};

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string("MPI ") + what + " failed: " + std::string(text, length));
}

// Calls ready() until it is true, sleeping between calls (from 10 us up to
// `longest`): a rank never spins inside MPI, where Open MPI busy-waits and,
// on a busy host, keeps the peer it waits for from running. A waiting rank
// wakes a few thousand times a second at most, which costs no measurable CPU.
// Returns false when `deadline` passes first.
using Clock = std::chrono::steady_clock;
template <class Ready>
bool poll(Ready ready, std::chrono::microseconds longest, Clock::time_point deadline = Clock::time_point::max()) {
  auto pause = std::chrono::microseconds(10);
  while (!ready()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, longest);
  }
  return true;
}

// False when `deadline` passed first (the request is then still pending).
bool wait(MPI_Request& request, const char* what, Clock::time_point deadline = Clock::time_point::max()) {
  return poll(
      [&] {
        int done = 0;
        check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
        return done != 0;
      },
      kUnitWait, deadline);
}

// False when the destination did not take the message by `deadline` (a
// large message waits for the receiver, which may hang).
bool send(int destination, int tag, const json& message, Clock::time_point deadline = Clock::time_point::max()) {
  const std::string text = server::dump_for_wire(message);
  if (text.size() > static_cast<std::size_t>(INT_MAX))
    throw std::runtime_error("a message of " + std::to_string(text.size()) + " bytes is too large for one MPI message");
  MPI_Request request;
  check(MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_CHAR, destination, tag, MPI_COMM_WORLD, &request),
        "send");
  return wait(request, "send", deadline);
}

struct Message {
  int source = -1;
  int tag = -1;
  json body;
};

// The next message from `source` with `tag` (MPI_ANY_SOURCE / MPI_ANY_TAG
// allowed), noticed at most `longest` after it arrives; nullopt when none
// came by `deadline`.
std::optional<Message> receive_by(int source, int tag, std::chrono::microseconds longest,
                                  Clock::time_point deadline) {
  MPI_Status status;
  const bool arrived = poll(
      [&] {
        int flag = 0;
        check(MPI_Iprobe(source, tag, MPI_COMM_WORLD, &flag, &status), "probe");
        return flag != 0;
      },
      longest, deadline);
  if (!arrived) return std::nullopt;
  int count = 0;
  check(MPI_Get_count(&status, MPI_CHAR, &count), "get_count");
  std::string text(static_cast<std::size_t>(count), '\0');
  MPI_Request request;
  check(MPI_Irecv(text.data(), count, MPI_CHAR, status.MPI_SOURCE, status.MPI_TAG, MPI_COMM_WORLD, &request),
        "receive");
  wait(request, "receive");
  Message m{status.MPI_SOURCE, status.MPI_TAG, {}};
  try {
    m.body = json::parse(text);
  } catch (const json::exception& e) {
    throw std::runtime_error("rank " + std::to_string(m.source) + " sent a message that is not JSON: " + e.what());
  }
  return m;
}

Message receive(int source, int tag, std::chrono::microseconds longest) {
  return *receive_by(source, tag, longest, Clock::time_point::max());
}

std::string format_seconds(double seconds) {
  std::ostringstream text;
  text << seconds;
  return text.str();
}

std::string processor_name() {
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  check(MPI_Get_processor_name(name, &length), "get_processor_name");
  return std::string(name, length);
}

// What an evaluator told the driver when it started.
struct Evaluator {
  int rank = 0;
  std::string host;
  std::string device;
  server::ServerInfo info;
  json execution;  // the evaluator's Backend::execution()
  std::string where() const { return "rank " + std::to_string(rank) + " on host " + host; }
};

// The driver's Backend: the jobs of a run_each() (one per candidate, or per
// candidate's racing slice) are cut into units of `unit_prompts`
// consecutive prompts, job after job (the boundaries depend only on the
// jobs, never on how many evaluators there are or which is free); each idle
// evaluator takes the next unit, so the evaluators work on several
// candidates at once, and each job's outputs come back in item order as
// soon as it and every job before it are answered. Every unit sent is
// answered before run_each() returns, also when one fails, `done` throws or
// the driver is asked to stop, so no evaluator is left mid-message.
// Speculative jobs' units go out only after every other job's, to
// evaluators that would otherwise wait for the last answers, and only while
// some other job's unit is still out.
class UnitDispatchBackend : public Backend {
 public:
  // `units_lost` is set when run_each() ends by an exception with units
  // still out: those evaluators may wait forever to hand their answers over.
  UnitDispatchBackend(std::vector<Evaluator> evaluators, std::size_t unit_prompts, double unit_timeout_s,
                      const std::atomic<int>* stop, bool& units_lost)
      : evaluators_(std::move(evaluators)),
        unit_prompts_(unit_prompts),
        unit_timeout_s_(unit_timeout_s),
        timeout_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(unit_timeout_s))),
        stop_grace_s_(unit_timeout_s > 0 ? unit_timeout_s : kStopGraceSeconds),
        stop_(stop),
        units_lost_(units_lost),
        connected_(Clock::now()) {
    for (const Evaluator& e : evaluators_) {
      by_rank_[e.rank] = &e;
      work_[e.rank] = {};
    }
  }

  ModelIdentity identity() const override { return reference().info.identity; }

  // How the evaluators compute (rank 1's, as for the identity; a run's
  // provenance), with how many there are and the unit size.
  nlohmann::json execution() const override {
    json out = reference().execution.is_object() ? reference().execution : json::object();
    out["evaluators"] = evaluators_.size();
    out["unit_prompts"] = unit_prompts_;
    return out;
  }

  // Per evaluator: where it runs, the units it answered, and how much of the
  // time since the evaluators connected it computed and waited (for a unit:
  // racing's looks, the end of a generation, the driver storing results).
  nlohmann::json workers() const override {
    const double since = seconds(Clock::now() - connected_);
    json ranks = json::array();
    for (const Evaluator& e : evaluators_) {
      const Work& w = work_.at(e.rank);
      const double busy = w.busy_seconds + (w.busy ? seconds(Clock::now() - w.sent) : 0.0);
      ranks.push_back({{"rank", e.rank},
                       {"host", e.host},
                       {"device", e.device},
                       {"units", w.units},
                       {"prompts", w.prompts},
                       {"busy_seconds", busy},
                       {"idle_fraction", since > 0 ? std::clamp(1.0 - busy / since, 0.0, 1.0) : 0.0}});
    }
    // What speculation cost: the units sent ahead, and those of jobs that
    // were not complete in time (or failed), whose work was thrown away here.
    const json speculative = {{"units", speculation_.units},
                              {"prompts", speculation_.prompts},
                              {"seconds", speculation_.seconds},
                              {"undelivered_prompts", speculation_.undelivered_prompts},
                              {"undelivered_seconds", speculation_.undelivered_seconds}};
    return {{"seconds", since}, {"unit_prompts", unit_prompts_}, {"ranks", ranks}, {"speculative", speculative}};
  }

  void validate(const Intervention& intervention) const override {
    server::check_intervention_fits(intervention, reference().info.identity, reference().info.supports);
  }

  // The evaluators' chat template, under the engine's name for the model, as
  // the server backend wraps prompts: the driver builds the same prompts and
  // slice identities a single ga-run builds.
  std::optional<ChatWrapper> chat_wrapper() const override {
    const auto& wrap = reference().info.user_prompt;
    if (!wrap) return std::nullopt;
    return ChatWrapper{chat_template_name(identity()), [wrap = *wrap](const std::string& message) {
                         return WrappedUserMessage{wrap.prefix + message + wrap.suffix, wrap.prefix.size()};
                       }};
  }

  std::vector<SampleOutput> run(const Intervention& intervention, const std::vector<BatchItem>& batch,
                                const RunOptions& options) override {
    RunJobResult got;
    // The caller's batch outlives this call: shared without a copy (the
    // no-op deleter leaves it to the caller).
    const std::shared_ptr<const std::vector<BatchItem>> items(&batch, [](const std::vector<BatchItem>*) {});
    run_each({RunJob{&intervention, items}}, options, [&](std::size_t, RunJobResult result) { got = std::move(result); },
             nullptr);
    if (got.error) std::rethrow_exception(got.error);
    return std::move(got.outputs);
  }

  void run_each(const std::vector<RunJob>& jobs, const RunOptions& options, const RunJobDone& done,
                const std::atomic<int>* stop) override {
    units_lost_ = true;  // until every unit sent is answered
    Dispatch(*this, jobs, options, done, stop).run();
  }

 private:
  // One run_each(): its units, who holds which, and what is delivered.
  class Dispatch {
   public:
    Dispatch(UnitDispatchBackend& backend, const std::vector<RunJob>& jobs, const RunOptions& options,
             const RunJobDone& done, const std::atomic<int>* stop)
        : b_(backend), jobs_(jobs), options_(options), done_(done), stop_(stop), state_(jobs.size()) {
      first_speculative_ = jobs.size();
      for (std::size_t j = 0; j < jobs.size(); ++j) {
        if (jobs[j].speculative) {
          first_speculative_ = std::min(first_speculative_, j);
        } else if (first_speculative_ < j) {
          throw std::logic_error("run_each: job " + std::to_string(j) + " follows a speculative job");
        }
        const std::size_t size = jobs[j].batch->size();
        state_[j].outputs.resize(size);
        for (std::size_t begin = 0; begin < size; begin += b_.unit_prompts_) {
          units_.push_back({j, begin, std::min(b_.unit_prompts_, size - begin)});
          ++state_[j].units_left;
        }
        if (!jobs[j].speculative) certain_units_ = units_.size();
      }
      for (const Evaluator& e : b_.evaluators_) idle_.insert(e.rank);
    }

    void run() {
      for (;;) {
        send_to_idle();
        deliver_finished();
        if (busy_.empty()) {
          if (may_send() && !idle_.empty()) continue;
          break;
        }
        receive_one();
      }
      b_.units_lost_ = false;  // every unit sent is answered
      if (callback_error_) std::rethrow_exception(callback_error_);
      if (delivered_ == first_speculative_) {
        deliver_speculative();
        return;
      }
      // The first job not delivered ends the run: it failed, or the driver
      // stopped before all its units were sent.
      RunJobResult last;
      last.error = state_[delivered_].error;
      if (!last.error)
        last.error = std::make_exception_ptr(RunStopped("after " + std::to_string(std::min(next_, certain_units_)) +
                                                        " of " + std::to_string(certain_units_) +
                                                        " units of these evaluations (the rest run again on resume)"));
      done_(delivered_, std::move(last));
    }

   private:
    struct Unit {
      std::size_t job;
      std::size_t begin;
      std::size_t count;
    };
    struct JobState {
      std::size_t units_left = 0;
      std::vector<SampleOutput> outputs;
      std::exception_ptr error;
      // Its units' time from sent to answered, added up: what the job cost
      // the evaluators (device-seconds), whichever ranks computed it.
      double seconds = 0.0;
      std::size_t prompts_sent = 0;
    };

    bool speculative(std::size_t unit) const { return unit >= certain_units_; }

    RunStopped stopped_with_units_out() const {
      return RunStopped("with " + std::to_string(busy_.size()) + " units in flight that did not come back within " +
                        format_seconds(b_.stop_grace_s_) + " s");
    }

    bool stop_seen() {
      const bool asked = (stop_ != nullptr && stop_->load() != 0) || (b_.stop_ != nullptr && b_.stop_->load() != 0);
      if (!stopping_ && asked) {
        stopping_ = true;
        stop_by_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(b_.stop_grace_s_));
      }
      return stopping_;
    }

    // No new unit after a failure (the jobs before the failed one have all
    // been sent: units go out in job order), a throwing `done`, or a stop;
    // a speculative unit only while another job's unit is being computed
    // (the caller waits for the speculative units out before it decides, so
    // one sent later would hold it up by a whole unit), never one of a
    // speculative job that failed.
    bool may_send() {
      while (next_ < units_.size() && speculative(next_) && state_[units_[next_].job].error) ++next_;
      if (next_ >= units_.size() || failed_ || callback_error_ || stop_seen()) return false;
      return !speculative(next_) || certain_out_ > 0;
    }

    std::span<const BatchItem> items_of(const Unit& unit) const {
      return std::span<const BatchItem>(*jobs_[unit.job].batch).subspan(unit.begin, unit.count);
    }

    void send_to_idle() {
      while (may_send() && !idle_.empty()) {
        const int rank = *idle_.begin();
        idle_.erase(idle_.begin());
        const Clock::time_point now = Clock::now();
        const Clock::time_point deadline = b_.unit_timeout_s_ > 0 ? now + b_.timeout_ : Clock::time_point::max();
        const std::size_t u = next_++;
        busy_[rank] = u;
        due_[rank] = deadline;
        Work& w = b_.work_.at(rank);
        w.busy = true;
        w.sent = now;
        state_[units_[u].job].prompts_sent += units_[u].count;
        if (speculative(u)) {
          ++b_.speculation_.units;
          b_.speculation_.prompts += units_[u].count;
        } else {
          ++certain_out_;
        }
        const json request =
            server::evaluate_request_to_json(*jobs_[units_[u].job].intervention, options_, items_of(units_[u]));
        // A rank that stopped reading (SIGSTOP, a hung host) blocks a large
        // send until the unit's deadline; a stop asked for meanwhile ends the
        // job as stopped, as a unit that does not come back does.
        if (!send(rank, kUnit, {{"unit", u}, {"request", request}}, deadline)) {
          if (stop_seen()) throw stopped_with_units_out();
          b_.overdue(rank, u);
        }
      }
    }

    // Hands over every job that is answered and has every earlier job
    // handed over, while `done` does not throw; speculative jobs wait for
    // deliver_speculative().
    void deliver_finished() {
      while (!callback_error_ && delivered_ < first_speculative_ && state_[delivered_].units_left == 0 &&
             !state_[delivered_].error) {
        JobState& job = state_[delivered_];
        RunJobResult result;
        result.outputs = std::move(job.outputs);
        result.seconds = job.seconds;
        try {
          done_(delivered_, std::move(result));
        } catch (...) {
          callback_error_ = std::current_exception();  // rethrown once the units out are answered
          return;
        }
        ++delivered_;
      }
    }

    // With every unit answered: each complete speculative job, in job order;
    // the work of the others is counted as thrown away.
    void deliver_speculative() {
      for (std::size_t j = first_speculative_; j < jobs_.size(); ++j) {
        JobState& job = state_[j];
        if (job.units_left > 0 || job.error) {
          b_.speculation_.undelivered_prompts += job.prompts_sent;
          b_.speculation_.undelivered_seconds += job.seconds;
          continue;
        }
        RunJobResult result;
        result.outputs = std::move(job.outputs);
        result.seconds = job.seconds;
        done_(j, std::move(result));  // nothing is in flight: a throw leaves no unit out
      }
    }

    void receive_one() {
      const auto first_due = std::min_element(due_.begin(), due_.end(), [](const auto& x, const auto& y) {
        return x.second < y.second;
      });
      // Wakes at least every kStopCheck to see a stop request while waiting.
      const Clock::time_point wake = std::min({first_due->second, stop_by_, Clock::now() + kStopCheck});
      const std::optional<Message> reply = receive_by(MPI_ANY_SOURCE, kReply, kUnitWait, wake);
      if (!reply) {
        const Clock::time_point now = Clock::now();
        const bool unit_overdue = now >= first_due->second;
        // Stopping (also with every unit sent), a unit that does not come
        // back in time ends the job as stopped, not failed: what finished is
        // stored. units_lost_ stays set, so the session ends every rank.
        if (stop_seen() && (unit_overdue || now >= stop_by_)) throw stopped_with_units_out();
        if (unit_overdue) b_.overdue(first_due->first, busy_.at(first_due->first));
        return;
      }
      const Message& m = *reply;
      const auto found = busy_.find(m.source);
      if (found == busy_.end())
        throw std::runtime_error(b_.by_rank_.at(m.source)->where() + " answered a unit it was not given");
      const std::size_t u = found->second;
      busy_.erase(found);
      due_.erase(m.source);
      idle_.insert(m.source);
      const Clock::time_point now = Clock::now();
      Work& w = b_.work_.at(m.source);
      const double took = seconds(now - w.sent);
      w.busy = false;
      w.busy_seconds += took;
      ++w.units;
      w.prompts += units_[u].count;
      JobState& job = state_[units_[u].job];
      job.seconds += took;
      if (speculative(u)) {
        b_.speculation_.seconds += took;
      } else {
        --certain_out_;
      }
      if (job.error) return;  // the job failed already: keep its first failure
      const std::string where = b_.by_rank_.at(m.source)->where();
      if (m.body.contains("error")) {
        const std::string code = m.body["error"].value("code", "");
        const std::string message = where + ": " + m.body["error"].value("message", "");
        if (code == "invalid_input") {
          job.error = std::make_exception_ptr(InvalidInputError(message));
        } else if (code == "invalid_request") {
          job.error = std::make_exception_ptr(std::invalid_argument(message));
        } else {
          job.error = std::make_exception_ptr(BackendError(message));
        }
      } else {
        try {
          if (m.body.value("unit", units_.size()) != u) throw server::ProtocolError("the reply names another unit");
          const std::vector<SampleOutput> got =
              server::evaluate_reply_from_json(m.body.at("reply"), items_of(units_[u]));
          std::copy(got.begin(), got.end(), job.outputs.begin() + static_cast<std::ptrdiff_t>(units_[u].begin));
          --job.units_left;
        } catch (const std::exception& e) {
          job.error = std::make_exception_ptr(BackendError(where + ": unreadable reply: " + e.what()));
        }
      }
      // A speculative job's failure only ends that job.
      if (job.error && !speculative(u)) failed_ = true;
    }

    UnitDispatchBackend& b_;
    const std::vector<RunJob>& jobs_;
    const RunOptions& options_;
    const RunJobDone& done_;
    const std::atomic<int>* stop_;
    std::vector<Unit> units_;
    std::size_t certain_units_ = 0;      // units_ before the first speculative one
    std::size_t first_speculative_ = 0;  // the first speculative job, or jobs_.size()
    std::size_t certain_out_ = 0;        // units of other jobs sent and not answered
    std::vector<JobState> state_;
    std::size_t next_ = 0;       // the next unit to send
    std::size_t delivered_ = 0;  // jobs handed to `done`
    std::set<int> idle_;
    std::map<int, std::size_t> busy_;           // rank -> unit
    std::map<int, Clock::time_point> due_;      // rank -> when its unit is overdue
    bool failed_ = false;                       // a job failed: send no new unit
    std::exception_ptr callback_error_;
    bool stopping_ = false;  // asked to stop: no new unit; those in flight have until stop_by_
    Clock::time_point stop_by_ = Clock::time_point::max();
  };

  // What one evaluator did since the evaluators connected.
  struct Work {
    std::size_t units = 0;
    std::size_t prompts = 0;
    double busy_seconds = 0.0;  // its units' time from sent to answered
    bool busy = false;
    Clock::time_point sent{};
  };

  // Speculative units since the evaluators connected.
  struct Speculation {
    std::size_t units = 0;
    std::size_t prompts = 0;
    double seconds = 0.0;
    std::size_t undelivered_prompts = 0;  // of jobs not complete in time, or failed
    double undelivered_seconds = 0.0;
  };

  static double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

  // Units are still out: the session ends every rank (units_lost_).
  [[noreturn]] void overdue(int rank, std::size_t unit) const {
    throw std::runtime_error(by_rank_.at(rank)->where() + " has not answered unit " + std::to_string(unit) + " in " +
                             format_seconds(unit_timeout_s_) + " s (--unit-timeout); ending the job");
  }

  const Evaluator& reference() const { return evaluators_.front(); }
  std::vector<Evaluator> evaluators_;  // by rank; the first is the reference
  std::map<int, const Evaluator*> by_rank_;
  std::size_t unit_prompts_;
  double unit_timeout_s_;  // 0: no deadline
  Clock::duration timeout_;
  double stop_grace_s_;  // how long units in flight may take after a stop request
  const std::atomic<int>* stop_;  // non-zero: asked to stop; may be null
  bool& units_lost_;
  Clock::time_point connected_;
  std::map<int, Work> work_;
  Speculation speculation_;
};

// The chat template of `backend` for one user message, as the server
// protocol states it (prefix + message + suffix): the backend's wrapper of
// an empty message.
std::optional<server::PromptTemplate> user_prompt_of(const Backend& backend) {
  const auto chat = backend.chat_wrapper();
  if (!chat) return std::nullopt;
  const WrappedUserMessage empty = chat->wrap("");
  return server::PromptTemplate{empty.text.substr(0, empty.content_begin), empty.text.substr(empty.content_begin)};
}

// One unit: the reply, or the protocol's error body.
json evaluate_unit(Backend& backend, const json& request, const server::RequestLimits& limits) {
  try {
    const server::EvaluateRequest r = server::evaluate_request_from_json(request, limits);
    return {{"reply", server::evaluate_reply_to_json(backend.run(r.intervention, r.items, r.options))}};
  } catch (const InvalidInputError& e) {
    return server::error_body("invalid_input", e.what());
  } catch (const BackendError& e) {
    return server::error_body("backend_error", e.what());
  } catch (const std::invalid_argument& e) {
    return server::error_body("invalid_request", e.what());
  } catch (const std::exception& e) {
    return server::error_body("backend_error", e.what());
  }
}

}  // namespace

RankSession::RankSession() {
  int initialized = 0;
  check(MPI_Initialized(&initialized), "initialized");
  if (!initialized) check(MPI_Init(nullptr, nullptr), "init");
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "set_errhandler");
  check(MPI_Comm_rank(MPI_COMM_WORLD, &place_.rank), "comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &place_.size), "comm_size");
  place_.host = processor_name();
  // The ranks that share this host's memory: the node-local rank picks a GPU.
  MPI_Comm local;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, place_.rank, MPI_INFO_NULL, &local), "split_type");
  check(MPI_Comm_rank(local, &place_.local_rank), "local comm_rank");
  check(MPI_Comm_size(local, &place_.local_size), "local comm_size");
  MPI_Comm_free(&local);
}

RankSession::~RankSession() {
  MPI_Finalize();
}

void RankSession::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; should it, end this rank anyway
}

void RankSession::send_setup(const json& setup) {
  for (int r = 1; r < place_.size; ++r) send(r, kSetup, setup);
}

std::unique_ptr<Backend> RankSession::connect_evaluators(std::size_t unit_prompts, double unit_timeout_s,
                                                         const std::atomic<int>* stop) {
  if (unit_prompts == 0) throw std::invalid_argument("prompts per unit must be at least 1");
  std::vector<Evaluator> evaluators;
  std::vector<std::string> problems;
  for (int r = 1; r < place_.size; ++r) {
    const Message m = receive(r, kHello, kIdleWait);
    Evaluator e;
    e.rank = r;
    e.host = m.body.value("host", "?");
    if (m.body.contains("error")) {
      problems.push_back(e.where() + " could not build its backend: " + m.body.value("error", ""));
      continue;
    }
    e.device = m.body.value("device", "");
    e.execution = m.body.value("execution", json::object());
    try {
      e.info = server::info_from_json(m.body.at("info"));
    } catch (const std::exception& error) {
      problems.push_back(e.where() + " sent an unreadable introduction: " + error.what());
      continue;
    }
    evaluators.push_back(std::move(e));
  }
  if (problems.empty()) {
    const Evaluator& first = evaluators.front();
    for (const Evaluator& e : evaluators) {
      if (e.info.identity.key() != first.info.identity.key()) {
        problems.push_back(e.where() + " (" + e.device + ") runs model " + e.info.identity.key() + ", but " +
                           first.where() + " (" + first.device + ") runs " + first.info.identity.key());
      } else if (e.info.user_prompt != first.info.user_prompt || e.info.supports != first.info.supports) {
        problems.push_back(e.where() + " wraps prompts or supports methods differently from " + first.where());
      }
    }
  }
  if (!problems.empty()) {
    std::string message = "refusing to start; nothing was evaluated. Every evaluator must run the same model file, "
                          "precision and device kind:";
    for (const std::string& p : problems) message += "\n  " + p;
    throw EvaluatorsRefused(message);
  }
  return std::make_unique<UnitDispatchBackend>(std::move(evaluators), unit_prompts, unit_timeout_s, stop,
                                               units_lost_);
}

void RankSession::stop_evaluators(const std::string& reason, int abort_code) {
  if (units_lost_) abort(abort_code);  // an evaluator may be stuck handing over an answer nobody takes
  for (int r = 1; r < place_.size; ++r) send(r, kStop, {{"reason", reason}});
}

std::optional<json> RankSession::receive_setup() {
  const Message m = receive(0, MPI_ANY_TAG, kIdleWait);
  if (m.tag == kStop) return std::nullopt;
  if (m.tag != kSetup)
    throw std::runtime_error("the driver sent message " + std::to_string(m.tag) + " before the setup");
  return m.body;
}

std::string RankSession::serve(Backend* backend, const std::string& build_error, const std::string& device) {
  json hello = {{"rank", place_.rank}, {"host", place_.host}, {"device", device}};
  std::string error = build_error;
  if (backend != nullptr) {
    try {
      server::ServerInfo info;
      info.identity = backend->identity();
      info.user_prompt = user_prompt_of(*backend);
      info.supports = server::probe_supported_fields(*backend);
      hello["info"] = server::info_to_json(info);
      hello["execution"] = backend->execution();
    } catch (const std::exception& e) {  // a model without a chat template, say
      error = e.what();
      backend = nullptr;
    }
  }
  if (backend == nullptr) hello["error"] = error;
  send(0, kHello, hello);
  // A unit is never larger than the driver cut it; the protocol's other
  // limits are the server's.
  server::RequestLimits limits;
  limits.max_items = std::numeric_limits<std::size_t>::max();
  for (;;) {
    const Message m = receive(0, MPI_ANY_TAG, kIdleWait);
    if (m.tag == kStop) return m.body.value("reason", "");
    if (m.tag != kUnit) throw std::runtime_error("the driver sent message " + std::to_string(m.tag) + " mid-search");
    json reply = backend == nullptr ? server::error_body("backend_error", error)
                                    : evaluate_unit(*backend, m.body.at("request"), limits);
    reply["unit"] = m.body.at("unit");
    send(0, kReply, reply);
  }
}

}  // namespace midtune::parallel

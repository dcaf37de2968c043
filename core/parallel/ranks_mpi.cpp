// MPI ranks: messages are JSON text (the server protocol's request, reply
// and info) in MPI_CHAR messages, one tag per kind. Every wait polls
// (MPI_Iprobe, MPI_Test) with a short sleep instead of blocking in MPI:
// Open MPI's blocking calls spin, and an evaluator waiting for its next unit
// must not take a core from one that computes.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
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
bool send_text(int destination, int tag, const std::string& text, Clock::time_point deadline) {
  if (text.size() > static_cast<std::size_t>(INT_MAX))
    throw std::runtime_error("a message of " + std::to_string(text.size()) + " bytes is too large for one MPI message");
  MPI_Request request;
  check(MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_CHAR, destination, tag, MPI_COMM_WORLD, &request),
        "send");
  return wait(request, "send", deadline);
}

bool send(int destination, int tag, const json& message, Clock::time_point deadline = Clock::time_point::max()) {
  return send_text(destination, tag, server::dump_for_wire(message), deadline);
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
// soon as it and every job before it are answered.
//
// Speculative jobs' units (racing's next step) go to evaluators left idle
// once the other jobs' units are all out, and stay out when run_each()
// returns: the evaluators compute them while the driver looks and plans.
// Each is kept under its request text; a later call's unit with the same
// request (the same intervention, options and prompts, so the same answer)
// takes that answer, or waits for it, instead of being sent again. A call
// that neither asks for a kept unit nor lists it as speculative again
// throws it away. After a failure, a throwing `done` or a stop, every unit
// out is answered before run_each() returns, so no evaluator is left
// mid-message; the destructor collects the speculative units still out.
class UnitDispatchBackend : public Backend {
 public:
  // `units_lost` is set when run_each() ends by an exception with units
  // still out, or the destructor cannot collect the speculative units out:
  // those evaluators may wait forever to hand their answers over.
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
      idle_.insert(e.rank);
    }
  }

  // Speculative units still out are answered (and thrown away) before the
  // driver tells the evaluators to stop.
  ~UnitDispatchBackend() override {
    if (units_lost_ || out_.empty()) return;
    try {
      const Clock::time_point by =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(stop_grace_s_));
      while (!out_.empty()) {
        const std::optional<Message> reply = receive_by(MPI_ANY_SOURCE, kReply, kUnitWait, by);
        if (!reply || out_.erase(reply->source) == 0) {
          units_lost_ = true;
          return;
        }
      }
    } catch (const std::exception&) {
      units_lost_ = true;
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
      const auto out = out_.find(e.rank);
      const double busy = w.busy_seconds + (out != out_.end() ? seconds(Clock::now() - out->second.sent) : 0.0);
      ranks.push_back({{"rank", e.rank},
                       {"host", e.host},
                       {"device", e.device},
                       {"units", w.units},
                       {"prompts", w.prompts},
                       {"busy_seconds", busy},
                       {"idle_fraction", since > 0 ? std::clamp(1.0 - busy / since, 0.0, 1.0) : 0.0}});
    }
    // What speculation did: the units sent ahead (answered), those a later
    // job took, and those thrown away (no later call wanted them, or they
    // failed).
    const json speculative = {{"units", speculation_.units},
                              {"prompts", speculation_.prompts},
                              {"seconds", speculation_.seconds},
                              {"used_prompts", speculation_.used_prompts},
                              {"used_seconds", speculation_.used_seconds},
                              {"discarded_prompts", speculation_.discarded_prompts},
                              {"discarded_seconds", speculation_.discarded_seconds}};
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
    units_lost_ = true;  // until every unit sent is answered or collectable
    Dispatch(*this, jobs, options, done, stop).run();
  }

 private:
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

  // A speculative unit, out or answered, kept under its request text.
  struct Ahead {
    std::size_t prompts = 0;
    int rank = 0;  // who computes or computed it
    bool answered = false;
    json reply;             // the evaluator's answer, once answered
    double seconds = 0.0;   // its evaluator time
    bool kept = true;       // false: no call wants it any more; its answer is thrown away
    std::size_t unit = kNone;  // the unit of the current call that waits for its answer
  };

  // The unit an evaluator holds.
  struct Out {
    std::uint64_t id = 0;          // the unit's number in the message
    std::size_t unit = kNone;      // the current call's unit, or kNone for a speculative one
    std::shared_ptr<Ahead> ahead;  // a speculative unit's
    std::size_t prompts = 0;
    Clock::time_point sent{};
    Clock::time_point due = Clock::time_point::max();
  };

  // One run_each(): its units, which are out, and what is delivered.
  class Dispatch {
   public:
    Dispatch(UnitDispatchBackend& backend, const std::vector<RunJob>& jobs, const RunOptions& options,
             const RunJobDone& done, const std::atomic<int>* stop)
        : b_(backend), jobs_(jobs), options_(options), done_(done), stop_(stop), state_(jobs.size()) {
      certain_jobs_ = jobs.size();
      for (std::size_t j = 0; j < jobs.size(); ++j) {
        if (jobs[j].speculative) {
          certain_jobs_ = std::min(certain_jobs_, j);
        } else if (certain_jobs_ < j) {
          throw std::logic_error("run_each: job " + std::to_string(j) + " follows a speculative job");
        }
        const std::size_t size = jobs[j].batch->size();
        state_[j].outputs.resize(size);
        // A unit's request text is needed now only to match it against the
        // speculative units kept, or to keep it as one; otherwise it is made
        // when the unit is sent, while the evaluators compute the others.
        const bool match = jobs[j].speculative || !b_.ahead_.empty();
        for (std::size_t begin = 0; begin < size; begin += b_.unit_prompts_) {
          Unit unit{j, begin, std::min(b_.unit_prompts_, size - begin), {}, nullptr};
          if (match) unit.request = request_text(unit);
          units_.push_back(std::move(unit));
          ++state_[j].units_left;
        }
        if (!jobs[j].speculative) certain_units_ = units_.size();
      }
      take_kept_units();
    }

    void run() {
      for (;;) {
        send_to_idle();
        // Answers already here first: each sets an evaluator free.
        if (receive_by_time(Clock::now())) continue;
        if (deliver_one()) continue;
        if (delivered_ == certain_jobs_) break;
        if (b_.out_.empty()) break;  // nothing out and nothing more to send: failed or stopped
        receive_waiting();
      }
      b_.units_lost_ = false;  // every unit out is answered or speculative
      if (delivered_ == certain_jobs_) return;
      if (callback_error_) std::rethrow_exception(callback_error_);
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
      std::string request;           // the evaluate request's text
      std::shared_ptr<Ahead> ahead;  // a kept speculative unit with the same request
    };
    struct JobState {
      std::size_t units_left = 0;
      std::vector<SampleOutput> outputs;
      std::exception_ptr error;
      // Its units' time from sent to answered, added up: what the job cost
      // the evaluators (device-seconds), whichever ranks computed it.
      double seconds = 0.0;
    };

    bool speculative(std::size_t unit) const { return unit >= certain_units_; }

    std::span<const BatchItem> items_of(const Unit& unit) const {
      return std::span<const BatchItem>(*jobs_[unit.job].batch).subspan(unit.begin, unit.count);
    }

    std::string request_text(const Unit& unit) const {
      return server::dump_for_wire(
          server::evaluate_request_to_json(*jobs_[unit.job].intervention, options_, items_of(unit)));
    }

    // Matches the kept speculative units against this call's: a unit of a
    // job takes the one with its request (answered: its answer now; out:
    // when it comes), a speculative one keeps it, and the rest are thrown
    // away.
    void take_kept_units() {
      std::map<std::string, std::shared_ptr<Ahead>> kept;
      for (std::size_t u = 0; u < units_.size(); ++u) {
        const auto found = b_.ahead_.find(units_[u].request);
        if (found == b_.ahead_.end()) continue;
        units_[u].ahead = found->second;
        if (speculative(u)) {
          kept.insert(*found);
        } else {
          found->second->unit = u;
        }
        b_.ahead_.erase(found);
      }
      for (auto& [request, ahead] : b_.ahead_) {
        ahead->kept = false;
        if (ahead->answered) b_.speculation_.discard(*ahead);
      }
      b_.ahead_ = std::move(kept);
      for (std::size_t u = 0; u < certain_units_; ++u) {
        const std::shared_ptr<Ahead>& ahead = units_[u].ahead;
        if (ahead && ahead->answered) {
          b_.speculation_.use(*ahead);
          fill(u, ahead->reply, ahead->seconds, b_.by_rank_.at(ahead->rank)->where());
        }
      }
    }

    RunStopped stopped_with_units_out() const {
      return RunStopped("with " + std::to_string(b_.out_.size()) + " units in flight that did not come back within " +
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

    // The next unit to send: none after a failure (the jobs before the
    // failed one have all been sent: units go out in job order), a throwing
    // `done` or a stop; never one a kept speculative unit answers or will.
    std::optional<std::size_t> next_to_send() {
      if (failed_ || callback_error_ || stop_seen()) return std::nullopt;
      while (next_ < units_.size() &&
             (units_[next_].ahead || (speculative(next_) && b_.ahead_.count(units_[next_].request) > 0)))
        ++next_;
      if (next_ >= units_.size()) return std::nullopt;
      return next_++;
    }

    void send_to_idle() {
      while (!b_.idle_.empty()) {
        const std::optional<std::size_t> u = next_to_send();
        if (!u) return;
        const int rank = *b_.idle_.begin();
        b_.idle_.erase(b_.idle_.begin());
        const Clock::time_point now = Clock::now();
        Out& out = b_.out_[rank];
        out.id = b_.units_sent_++;
        out.prompts = units_[*u].count;
        out.sent = now;
        out.due = b_.unit_timeout_s_ > 0 ? now + b_.timeout_ : Clock::time_point::max();
        if (speculative(*u)) {
          out.ahead = std::make_shared<Ahead>();
          out.ahead->prompts = units_[*u].count;
          out.ahead->rank = rank;
          b_.ahead_.emplace(units_[*u].request, out.ahead);
        } else {
          out.unit = *u;
        }
        if (units_[*u].request.empty()) units_[*u].request = request_text(units_[*u]);
        // The request's text as it is, inside the unit message.
        const std::string message =
            "{\"unit\":" + std::to_string(out.id) + ",\"request\":" + units_[*u].request + "}";
        // A rank that stopped reading (SIGSTOP, a hung host) blocks a large
        // send until the unit's deadline; a stop asked for meanwhile ends the
        // job as stopped, as a unit that does not come back does.
        if (!send_text(rank, kUnit, message, out.due)) {
          if (stop_seen()) throw stopped_with_units_out();
          b_.overdue(rank, out.id);
        }
      }
    }

    // Hands over the next job if it is answered and every earlier job is
    // handed over, unless `done` threw.
    bool deliver_one() {
      if (callback_error_ || delivered_ >= certain_jobs_) return false;
      JobState& job = state_[delivered_];
      if (job.units_left > 0 || job.error) return false;
      RunJobResult result;
      result.outputs = std::move(job.outputs);
      result.seconds = job.seconds;
      try {
        done_(delivered_, std::move(result));
      } catch (...) {
        callback_error_ = std::current_exception();  // rethrown once the units out are answered
        return false;
      }
      ++delivered_;
      return true;
    }

    // Waits for the next answer, at most until the first unit out is
    // overdue or, after a stop request, until the units out had their grace.
    void receive_waiting() {
      const auto first_due = std::min_element(b_.out_.begin(), b_.out_.end(), [](const auto& x, const auto& y) {
        return x.second.due < y.second.due;
      });
      // Wakes at least every kStopCheck to see a stop request while waiting.
      const Clock::time_point wake = std::min({first_due->second.due, stop_by_, Clock::now() + kStopCheck});
      if (receive_by_time(wake)) return;
      const Clock::time_point now = Clock::now();
      const bool unit_overdue = now >= first_due->second.due;
      // Stopping (also with every unit sent), a unit that does not come
      // back in time ends the job as stopped, not failed: what finished is
      // stored. units_lost_ stays set, so the session ends every rank.
      if (stop_seen() && (unit_overdue || now >= stop_by_)) throw stopped_with_units_out();
      if (unit_overdue) b_.overdue(first_due->first, first_due->second.id);
    }

    // Takes one answer that arrives by `by`; false when none did.
    bool receive_by_time(Clock::time_point by) {
      const std::optional<Message> reply = receive_by(MPI_ANY_SOURCE, kReply, kUnitWait, by);
      if (!reply) return false;
      const Message& m = *reply;
      const auto found = b_.out_.find(m.source);
      if (found == b_.out_.end())
        throw std::runtime_error(b_.by_rank_.at(m.source)->where() + " answered a unit it was not given");
      const Out out = std::move(found->second);
      b_.out_.erase(found);
      b_.idle_.insert(m.source);
      const double took = seconds(Clock::now() - out.sent);
      Work& w = b_.work_.at(m.source);
      w.busy_seconds += took;
      ++w.units;
      w.prompts += out.prompts;
      const std::string where = b_.by_rank_.at(m.source)->where();
      json body = m.body;
      if (!body.contains("error") && body.value("unit", out.id + 1) != out.id)
        body = server::error_body("backend_error", "unreadable reply: the reply names another unit");
      if (!out.ahead) {
        fill(out.unit, body, took, where);
        return true;
      }
      Ahead& ahead = *out.ahead;
      ++b_.speculation_.units;
      b_.speculation_.prompts += ahead.prompts;
      b_.speculation_.seconds += took;
      ahead.answered = true;
      ahead.seconds = took;
      if (ahead.unit != kNone) {  // a unit of this call waits for it
        b_.speculation_.use(ahead);
        fill(ahead.unit, body, took, where);
      } else if (!ahead.kept) {
        b_.speculation_.discard(ahead);
      } else if (body.contains("error")) {  // not kept: the job runs it again and fails in its turn
        ahead.kept = false;
        b_.speculation_.discard(ahead);
        b_.ahead_.erase(request_of(out.ahead));
      } else {
        ahead.reply = std::move(body);
      }
      return true;
    }

    // The request text under which `ahead` is kept.
    std::string request_of(const std::shared_ptr<Ahead>& ahead) const {
      for (const auto& [request, kept] : b_.ahead_)
        if (kept == ahead) return request;
      return {};
    }

    // Unit `u`'s answer `body` (a reply or the protocol's error body),
    // computed by `where` in `took` seconds.
    void fill(std::size_t u, const json& body, double took, const std::string& where) {
      JobState& job = state_[units_[u].job];
      job.seconds += took;
      if (job.error) return;  // the job failed already: keep its first failure
      if (body.contains("error")) {
        const std::string code = body["error"].value("code", "");
        const std::string message = where + ": " + body["error"].value("message", "");
        if (code == "invalid_input") {
          job.error = std::make_exception_ptr(InvalidInputError(message));
        } else if (code == "invalid_request") {
          job.error = std::make_exception_ptr(std::invalid_argument(message));
        } else {
          job.error = std::make_exception_ptr(BackendError(message));
        }
      } else {
        try {
          const std::vector<SampleOutput> got = server::evaluate_reply_from_json(body.at("reply"), items_of(units_[u]));
          std::copy(got.begin(), got.end(), job.outputs.begin() + static_cast<std::ptrdiff_t>(units_[u].begin));
          --job.units_left;
        } catch (const std::exception& e) {
          job.error = std::make_exception_ptr(BackendError(where + ": unreadable reply: " + e.what()));
        }
      }
      if (job.error) failed_ = true;
    }

    UnitDispatchBackend& b_;
    const std::vector<RunJob>& jobs_;
    const RunOptions& options_;
    const RunJobDone& done_;
    const std::atomic<int>* stop_;
    std::vector<Unit> units_;
    std::size_t certain_units_ = 0;  // units_ before the first speculative one
    std::size_t certain_jobs_ = 0;   // jobs_ before the first speculative one
    std::vector<JobState> state_;
    std::size_t next_ = 0;       // the next unit to send
    std::size_t delivered_ = 0;  // jobs handed to `done`
    bool failed_ = false;        // a job failed: send no new unit
    std::exception_ptr callback_error_;
    bool stopping_ = false;  // asked to stop: no new unit; those in flight have until stop_by_
    Clock::time_point stop_by_ = Clock::time_point::max();
  };

  // What one evaluator did since the evaluators connected.
  struct Work {
    std::size_t units = 0;
    std::size_t prompts = 0;
    double busy_seconds = 0.0;  // its units' time from sent to answered
  };

  // Speculative units since the evaluators connected (answered ones).
  struct Speculation {
    std::size_t units = 0;
    std::size_t prompts = 0;
    double seconds = 0.0;
    std::size_t used_prompts = 0;  // taken by a later call's job
    double used_seconds = 0.0;
    std::size_t discarded_prompts = 0;  // wanted by no later call, or failed
    double discarded_seconds = 0.0;
    void use(const Ahead& a) {
      used_prompts += a.prompts;
      used_seconds += a.seconds;
    }
    void discard(const Ahead& a) {
      discarded_prompts += a.prompts;
      discarded_seconds += a.seconds;
    }
  };

  static double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

  // Units are still out: the session ends every rank (units_lost_).
  [[noreturn]] void overdue(int rank, std::uint64_t unit) const {
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
  std::set<int> idle_;                                  // evaluators without a unit
  std::map<int, Out> out_;                              // rank -> the unit it holds
  std::map<std::string, std::shared_ptr<Ahead>> ahead_;  // speculative units kept, by request text
  std::uint64_t units_sent_ = 0;
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

// SPDX-License-Identifier: Apache-2.0
// gradsyncctl: the operator CLI of gradsyncd, over the Admin gRPC service on
// the daemon's Unix socket. Modelled on NCCL's ras client: a few options, a
// timeout on everything, text or JSON output.
//
// Exit codes: 0 success; 1 the daemon answered with an error (or the job
// asked for does not exist); 2 the daemon cannot be reached (no socket,
// connection refused, no answer in time); 64 bad usage (EX_USAGE).
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "tools/gradsyncctl/admin_client.h"
#include "tools/gradsyncctl/format.h"
#include "tools/gradsyncctl/stats_view.h"

namespace gradsync::ctl {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUnreachable = 2;
constexpr int kExitUsage = 64;
constexpr double kMaxTimeoutSeconds = 86400;

constexpr char kUsage[] =
    "usage: gradsyncctl [--socket PATH] [--timeout SECONDS] [--json] <command>\n"
    "\n"
    "Queries a running gradsyncd over its Admin service.\n"
    "\n"
    "commands:\n"
    "  status          daemon version, uptime, pid, host, jobs and the config in effect\n"
    "  jobs [JOB_ID]   jobs with their counters and ranks (only JOB_ID when given)\n"
    "  members [JOB_ID]  the nodes of multi-node jobs: role, address, topology, ranks, heartbeat age\n"
    "  history [JOB_ID]  the epochs of elastic jobs: when, why, size before and after\n"
    "  timeline JOB start FILE [mark-cycles]\n"
    "                  starts JOB's timeline (Chrome-trace JSON) in FILE, a name inside the\n"
    "                  daemon's timeline_dir; replaces one that runs\n"
    "  timeline JOB stop  stops it\n"
    "  tensors [JOB_ID]  collectives waiting for ranks: name, age, ranks submitted and missing\n"
    "  stats [JOB_ID]  per job: collectives by type and dtype (count, bytes, latency p50/p90/p99),\n"
    "                  phases, errors by cause\n"
    "  top             a live view, refreshed in place (the first after one interval): per job\n"
    "                  operations and bytes per second,\n"
    "                  latency percentiles, tensors in flight, stalls and errors of the interval\n"
    "  drain           refuse new jobs, let running ones finish; the daemon exits when none is left\n"
    "  undrain         take new jobs again (a drain not yet finished)\n"
    "  health [SERVICE]  gRPC health status (grpc.health.v1) of the daemon or one service\n"
    "                  (gradsync.v1.Control is NOT_SERVING while draining); exit 0 only if SERVING\n"
    "  help            this text\n"
    "\n"
    "options:\n"
    "  --socket PATH       the daemon's socket (default $GRADSYNC_SOCKET, else /run/gradsync/gradsyncd.sock)\n"
    "  --timeout SECONDS   budget for connecting plus the request (default 5)\n"
    "  --json              print the response as JSON, nothing else (top: one line per refresh)\n"
    "  --interval SECONDS  top: seconds between refreshes (default 2)\n"
    "  --count N           top: stop after N refreshes (default: until interrupted)\n"
    "  -h, --help          this text\n"
    "\n"
    "exit codes: 0 ok, 1 error from the daemon, 2 daemon unreachable, 64 bad usage\n";

struct Options {
  AdminClientOptions client;
  bool json = false;
  double interval_seconds = 2;
  long count = 0;  // 0: forever
  bool help = false;
  std::vector<std::string> command;  // the command and its arguments
};

int usageError(const std::string& message) {
  std::fprintf(stderr, "gradsyncctl: %s\n(try 'gradsyncctl help')\n", message.c_str());
  return kExitUsage;
}

bool parseTimeout(const std::string& text, double* seconds) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == nullptr || *end != '\0') return false;
  if (!std::isfinite(value) || value <= 0 || value > kMaxTimeoutSeconds) return false;
  *seconds = value;
  return true;
}

// Options may come before or after the command; "--" ends them. Returns
// an empty string on success, else the usage error.
namespace {

// "--name=value": true, with both parts.
bool splitOption(const std::string& arg, std::string* name, std::string* value) {
  const size_t eq = arg.find('=');
  if (arg.rfind("--", 0) != 0 || eq == std::string::npos) return false;
  *name = arg.substr(0, eq);
  *value = arg.substr(eq + 1);
  return true;
}

bool isFlag(const std::string& name) { return name == "--json" || name == "--help" || name == "-h"; }
bool takesValue(const std::string& name) {
  return name == "--socket" || name == "--timeout" || name == "--interval" || name == "--count";
}

// One of the options with a value; the error, or empty.
std::string setValueOption(const std::string& name, const std::string& value, Options* options) {
  if (name == "--socket") {
    if (value.empty()) return "--socket needs a non-empty path";
    options->client.socket_path = value;
    return "";
  }
  if (name == "--interval") {
    if (parseTimeout(value, &options->interval_seconds)) return "";
    return "--interval needs a number of seconds in (0, 86400], got '" + value + "'";
  }
  if (name == "--count") {
    char* end = nullptr;
    options->count = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || options->count < 1) {
      return "--count needs a positive integer, got '" + value + "'";
    }
    return "";
  }
  if (parseTimeout(value, &options->client.timeout_seconds)) return "";
  return "--timeout needs a number of seconds in (0, 86400], got '" + value + "'";
}

}  // namespace

std::string parseArgs(int argc, char** argv, Options* options) {
  // As for the client library, $GRADSYNC_SOCKET names the daemon by default.
  if (const char* env = std::getenv("GRADSYNC_SOCKET"); env != nullptr && *env != '\0') {
    options->client.socket_path = env;
  }
  bool options_done = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (options_done || arg.empty() || arg[0] != '-' || arg == "-") {
      options->command.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    std::string name = arg;
    std::string value;
    const bool has_value = splitOption(arg, &name, &value);
    if (isFlag(name)) {
      if (has_value) return "option " + name + " takes no value";
      (name == "--json" ? options->json : options->help) = true;
      continue;
    }
    if (!takesValue(name)) return "unknown option '" + arg + "'";
    if (!has_value) {
      if (i + 1 >= argc) return "option " + name + " needs a value";
      value = argv[++i];
    }
    if (std::string error = setValueOption(name, value, options); !error.empty()) return error;
  }
  return "";
}

// Reports a failed call on stderr and returns the exit code.
int reportError(const Status& status) {
  std::fprintf(stderr, "gradsyncctl: %s\n", status.message().c_str());
  bool unreachable = status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kDeadlineExceeded;
  return unreachable ? kExitUnreachable : kExitFailed;
}

int noSuchJob(const AdminClient& client, const std::string& job_id) {
  std::fprintf(stderr, "gradsyncctl: no job '%s' on gradsyncd at %s\n", job_id.c_str(), client.target().c_str());
  return kExitFailed;
}

int printJson(const google::protobuf::Message& message) {
  StatusOr<std::string> json = formatJson(message);
  if (!json.isOk()) return reportError(json.status());
  std::fputs(json->c_str(), stdout);
  return kExitOk;
}

int runStatus(AdminClient& client, const Options& options) {
  StatusOr<v1::GetStatusResponse> status = client.getStatus();
  if (!status.isOk()) return reportError(status.status());
  if (options.json) return printJson(*status);
  std::fputs(formatStatus(*status, options.client.socket_path).c_str(), stdout);
  return kExitOk;
}

enum class JobView { kJobs, kMembers, kHistory };

int runJobs(AdminClient& client, const Options& options, const std::string& job_id, JobView view) {
  StatusOr<v1::ListJobsResponse> jobs = client.listJobs(job_id, view == JobView::kHistory);
  if (!jobs.isOk()) return reportError(jobs.status());
  bool missing = !job_id.empty() && jobs->jobs_size() == 0;
  int rc = kExitOk;
  if (options.json) {
    rc = printJson(*jobs);
  } else if (!missing) {
    const std::string text = view == JobView::kMembers   ? formatMembers(*jobs)
                             : view == JobView::kHistory ? formatHistory(*jobs)
                                                         : formatJobs(*jobs);
    std::fputs(text.c_str(), stdout);
  }
  if (rc == kExitOk && missing) {
    return noSuchJob(client, job_id);
  }
  return rc;
}

int runTimeline(AdminClient& client, const std::string& job, bool start, const std::string& file, bool marks) {
  v1::ControlTimelineRequest request;
  request.set_job_id(job);
  request.set_start(start);
  request.set_file(file);
  request.set_mark_cycles(marks);
  auto response = client.controlTimeline(request);
  if (!response.isOk()) return reportError(response.status());
  if (start) {
    std::printf("timeline of job '%s': %s\n", job.c_str(), response->path().c_str());
  } else {
    std::printf("timeline of job '%s' stopped\n", job.c_str());
  }
  return kExitOk;
}

int runTensors(AdminClient& client, const Options& options, const std::string& job_id) {
  auto tensors = client.listTensors(job_id);
  if (!tensors.isOk()) return reportError(tensors.status());
  if (options.json) return printJson(*tensors);
  if (!job_id.empty() && tensors->jobs_size() == 0) {
    return noSuchJob(client, job_id);
  }
  std::fputs(formatTensors(*tensors).c_str(), stdout);
  return kExitOk;
}

int runStats(AdminClient& client, const Options& options, const std::string& job_id) {
  auto jobs = client.listJobs(job_id);
  if (!jobs.isOk()) return reportError(jobs.status());
  if (options.json) return printJson(*jobs);
  if (!job_id.empty() && jobs->jobs_size() == 0) {
    return noSuchJob(client, job_id);
  }
  std::fputs(formatStats(*jobs).c_str(), stdout);
  return kExitOk;
}

// Refreshes until interrupted or --count screens; each refresh has the whole
// --timeout for its calls.
int runTop(AdminClient& client, const Options& options) {
  const bool terminal = ::isatty(STDOUT_FILENO) == 1 && !options.json;
  // A first snapshot, so that the first screen has rates too.
  auto first = client.listJobs("");
  if (!first.isOk()) return reportError(first.status());
  v1::ListJobsResponse before = std::move(*first);
  auto taken = std::chrono::steady_clock::now();
  for (long screen = 0; options.count == 0 || screen < options.count; ++screen) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options.interval_seconds));
    client.renewDeadline();
    auto status = client.getStatus();
    if (!status.isOk()) return reportError(status.status());
    auto jobs = client.listJobs("");
    if (!jobs.isOk()) return reportError(jobs.status());
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - taken).count();
    if (options.json) {
      printJson(*jobs);
    } else {
      const std::string text = formatTop(*status, before, *jobs, seconds);
      std::fputs(((terminal ? "\x1b[H\x1b[2J" : screen > 0 ? "\n" : "") + text).c_str(), stdout);
    }
    std::fflush(stdout);
    before = std::move(*jobs);
    taken = now;
  }
  return kExitOk;
}

int runDrain(AdminClient& client, const Options& options, bool draining) {
  auto response = client.setDraining(draining);
  if (!response.isOk()) return reportError(response.status());
  if (options.json) return printJson(*response);
  if (draining) {
    std::printf("draining: no new jobs; %d running; gradsyncd exits once none is left\n", response->jobs());
  } else {
    std::printf("not draining: gradsyncd takes new jobs again (%d running)\n", response->jobs());
  }
  return kExitOk;
}

int runHealth(AdminClient& client, const Options& options, const std::string& service) {
  auto status = client.health(service);
  if (!status.isOk()) return reportError(status.status());
  if (options.json) {
    grpc::health::v1::HealthCheckResponse response;
    response.set_status(*status);
    printJson(response);
  } else {
    std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(*status).c_str());
  }
  return *status == grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk : kExitFailed;
}

namespace {

size_t argumentsOf(const Options& options) { return options.command.size() - 1; }
std::string commandOf(const Options& options) { return options.command[0]; }

int statusCommand(AdminClient& client, const Options& options) {
  if (argumentsOf(options) != 0) return usageError("status takes no arguments");
  return runStatus(client, options);
}

int jobViewCommand(AdminClient& client, const Options& options) {
  const std::string command = commandOf(options);
  if (argumentsOf(options) > 1) return usageError(command + " takes at most one JOB_ID");
  const JobView view = command == "members"   ? JobView::kMembers
                       : command == "history" ? JobView::kHistory
                                              : JobView::kJobs;
  return runJobs(client, options, argumentsOf(options) == 1 ? options.command[1] : std::string(), view);
}

int timelineCommand(AdminClient& client, const Options& options) {
  const size_t arguments = argumentsOf(options);
  const bool start = arguments >= 3 && options.command[2] == "start";
  const bool marks = arguments == 4 && options.command[4] == "mark-cycles";
  if (!(arguments == 2 && options.command[2] == "stop") && !(start && (arguments == 3 || marks))) {
    return usageError("usage: timeline JOB start FILE [mark-cycles] | timeline JOB stop");
  }
  return runTimeline(client, options.command[1], start, start ? options.command[3] : "", marks);
}

int perJobCommand(AdminClient& client, const Options& options) {
  const std::string command = commandOf(options);
  if (argumentsOf(options) > 1) return usageError(command + " takes at most one argument");
  const std::string job = argumentsOf(options) == 1 ? options.command[1] : std::string();
  if (command == "tensors") return runTensors(client, options, job);
  if (command == "stats") return runStats(client, options, job);
  return runHealth(client, options, job);
}

int daemonCommand(AdminClient& client, const Options& options) {
  const std::string command = commandOf(options);
  if (argumentsOf(options) != 0) return usageError(command + " takes no arguments");
  return command == "top" ? runTop(client, options) : runDrain(client, options, command == "drain");
}

struct Command {
  const char* name;
  int (*run)(AdminClient& client, const Options& options);
};

constexpr Command kCommands[] = {
    {"status", statusCommand},     {"jobs", jobViewCommand},   {"members", jobViewCommand}, {"history", jobViewCommand},
    {"timeline", timelineCommand}, {"tensors", perJobCommand}, {"stats", perJobCommand},    {"health", perJobCommand},
    {"top", daemonCommand},        {"drain", daemonCommand},   {"undrain", daemonCommand},
};

}  // namespace

int run(int argc, char** argv) {
  Options options;
  std::string error = parseArgs(argc, argv, &options);
  if (!error.empty()) return usageError(error);
  if (options.help || (!options.command.empty() && options.command[0] == "help")) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (options.command.empty()) return usageError("missing command");
  for (const Command& command : kCommands) {
    if (options.command[0] != command.name) continue;
    AdminClient client(options.client);
    return command.run(client, options);
  }
  return usageError("unknown command '" + options.command[0] + "'");
}

}  // namespace
}  // namespace gradsync::ctl

int main(int argc, char** argv) { return gradsync::ctl::run(argc, argv); }

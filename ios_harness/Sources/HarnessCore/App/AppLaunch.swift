import Foundation

/// Everything the iOS app does besides the UIKit lifecycle: its command line, its Documents, the
/// trial run and the probes. The app shell (`App/Sources`) and `harness app` (the same code on a
/// Linux or macOS host, a directory standing in for the app's data container) both call this, so
/// the phone twin runs the real app logic.
///
/// Command line (what the controller passes through DVT), every path relative to Documents:
/// - `--spec PATH [--out PATH] [--tuning PATH]`: run the spec; `--out` defaults to
///   `results/<spec file name>`. The spec's `model`, when relative, is resolved under Documents too
///   (an absolute one or one with `..` is a `bad_spec` result).
/// - `--probe thermal [--out PATH]`: write one `AppProbe.ThermalReading`; `--out` defaults to
///   `probes/thermal.json`.
/// - nothing: no work; the app shows its build and waits.
/// Anything else (an absolute path, a `..` component, an unknown option) is refused: one line on
/// stdout, exit 64, nothing written.
public struct AppLaunch: Sendable {
    public enum Request: Equatable, Sendable {
        /// No `--spec` or `--probe`: the app shows its build and stays up.
        case idle
        /// Run a spec. Paths are absolute, already resolved under Documents.
        case trial(spec: String, out: String, tuning: String?)
        /// Write one probe reading to `out`; the sentinel names `token` (the file name minus `.json`).
        case probe(AppProbe.Kind, out: String, token: String)
        /// A command line the app cannot act on.
        case refused(LaunchProblem)
    }

    /// Exit code of a refused command line (nothing written), as `harness` uses for one.
    public static let exitBadArguments: Int32 = 64

    public static let usage =
        "usage: --spec PATH [--out PATH] [--tuning PATH] | --probe thermal [--out PATH]  (paths relative to Documents)"

    public let documents: AppDocuments
    public let request: Request

    /// `arguments` without the program name.
    public init(arguments: [String], documents: AppDocuments) {
        self.documents = documents
        do {
            request = try Self.parse(arguments, documents: documents)
        } catch {
            request = .refused(error)
        }
    }

    /// One line for the app's screen.
    public var summary: String {
        switch request {
        case .idle: return "idle"
        case .trial(let spec, _, _): return "running \(URL(fileURLWithPath: spec).lastPathComponent)"
        case .probe(let kind, _, _): return "probe \(kind.rawValue)"
        case .refused(let problem): return "refused: \(problem)"
        }
    }

    /// Does the work and returns the process's exit code:
    /// 0 ok result (or probe reading) written; 2 error result (or a reading without a thermal
    /// state) written; 3 the output could not be written; 64 refused command line.
    /// Every line (the sentinel `HARNESS_DONE <id> <absolute path>`, diagnostics) goes to `emit`,
    /// stdout by default: an app's stdout is its only console. `.idle` says so and returns 0;
    /// the caller keeps the process up, as the app stays on screen.
    public func run(
        factory: any EngineFactory, thermal: any ThermalProbe, clock: any MonotonicClock = SystemClock(),
        interrupted: () -> String? = { nil }, emit: (String) -> Void = Console.line
    ) -> Int32 {
        switch request {
        case .idle:
            emit("harness \(HarnessBuild.id): idle (no --spec or --probe)")
            return SpecRun.exitOK
        case .refused(let problem):
            emit("harness: \(problem)")
            emit(Self.usage)
            return Self.exitBadArguments
        case .trial(let spec, let out, let tuning):
            try? documents.createLayout()
            let docs = documents
            return SpecRun.execute(
                specPath: spec, outPath: out, tuningPath: tuning, factory: factory,
                runner: TrialRunner(clock: clock, thermal: thermal),
                resolve: { try Self.resolve($0, $1, in: docs) },
                interrupted: interrupted, print: emit, diagnose: emit)
        case .probe(let kind, let out, let token):
            try? documents.createLayout()
            return AppProbe.write(kind, to: out, token: token, thermal: thermal, clock: clock, emit: emit)
        }
    }

    /// The request `arguments` make, or why they make none.
    public static func parse(_ arguments: [String], documents: AppDocuments) throws(LaunchProblem) -> Request {
        let args: Args
        do {
            args = try Args(arguments)
            if let stray = args.command { throw Args.Problem(description: "unexpected argument '\(stray)'") }
            try args.only(["spec", "out", "tuning", "probe"])
        } catch {
            throw .arguments("\(error)")
        }
        func resolved(_ option: String) throws(LaunchProblem) -> String? {
            guard let given = args.options[option] else { return nil }
            do {
                return try documents.resolve(given)
            } catch {
                throw .path(option: option, error)
            }
        }
        switch (args.options["spec"], args.options["probe"]) {
        case (nil, nil):
            if let lone = args.options.keys.sorted().first {
                throw .arguments("--\(lone) without --spec or --probe")
            }
            return .idle
        case (.some, .some):
            throw .arguments("--spec and --probe exclude each other")
        case (.some, nil):
            let spec = try resolved("spec")!
            let out = try resolved("out")
                ?? documents.path(.results) + "/" + URL(fileURLWithPath: spec).lastPathComponent
            return .trial(spec: spec, out: out, tuning: try resolved("tuning"))
        case (nil, .some(let name)):
            guard let kind = AppProbe.Kind(rawValue: name) else {
                throw .arguments("unknown probe '\(name)' (have: \(AppProbe.Kind.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            if args.options["tuning"] != nil { throw .arguments("--tuning goes with --spec, not --probe") }
            let out = try resolved("out") ?? documents.path(.probes) + "/\(kind.rawValue).json"
            return .probe(kind, out: out, token: AppProbe.token(forOut: out))
        }
    }

    /// A path the spec names (`model`, `tuning_table`) as the app opens it: relative to Documents,
    /// like every other path.
    static func resolve(_ field: String, _ path: String, in documents: AppDocuments) throws(HarnessError) -> String {
        do {
            return try documents.resolve(path)
        } catch {
            throw HarnessError(.badSpec, "\(field): \(error)")
        }
    }
}

/// Why a launch does nothing but say so (exit 64).
public enum LaunchProblem: Error, Equatable, Sendable, CustomStringConvertible {
    /// The command line is not one the app knows.
    case arguments(String)
    /// A path option names something outside Documents.
    case path(option: String, AppPathError)
    /// The host's stand-in for a device reading is set to something no device reports.
    case environment(String)

    public var description: String {
        switch self {
        case .arguments(let why): return why
        case .path(let option, let error): return "--\(option): \(error)"
        case .environment(let why): return why
        }
    }
}

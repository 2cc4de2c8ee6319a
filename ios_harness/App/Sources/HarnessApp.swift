import Foundation
import HarnessCore
import SwiftUI
import UIKit

/// The app entry: the same `SpecRun` as the `harness` CLI. Launched through devicectl / DVT with
/// `--spec <path>` (absolute, or relative to Documents); writes `Documents/results/<spec name>`,
/// prints `HARNESS_DONE <trial_id> <path>` and exits. Without `--spec` it shows its build and waits.
@main
struct HarnessApp: App {
    @UIApplicationDelegateAdaptor(AppDelegate.self) var delegate

    var body: some Scene {
        WindowGroup { Text("harness \(HarnessBuild.id)\n\(delegate.status)").multilineTextAlignment(.center) }
    }
}

final class AppDelegate: NSObject, UIApplicationDelegate, ObservableObject {
    @Published var status = "idle"
    private let resigned = ResignFlag()

    func application(_ app: UIApplication, didFinishLaunchingWithOptions _: [UIApplication.LaunchOptionsKey: Any]? = nil) -> Bool {
        setvbuf(stdout, nil, _IOLBF, 0)
        app.isIdleTimerDisabled = true
        // A backgrounded app loses the GPU: a resign during the run marks the trial interrupted.
        NotificationCenter.default.addObserver(forName: UIApplication.willResignActiveNotification, object: nil, queue: nil) {
            [resigned] _ in resigned.set()
        }
        guard let request = AppRequest(arguments: CommandLine.arguments) else { return true }
        status = "running \(request.specPath)"
        let flag = resigned
        Thread.detachNewThread {
            let code = SpecRun.execute(
                specPath: request.specPath, outPath: request.outPath, tuningPath: request.tuningPath,
                factory: BuiltinEngines(), runner: TrialRunner(thermal: Thermal.platformProbe()),
                interrupted: { flag.isSet ? "the app resigned active during the run (GPU access lost)" : nil })
            exit(code)
        }
        return true
    }
}

/// `--spec P [--out P] [--tuning P]`, relative paths under Documents.
struct AppRequest {
    let specPath: String
    let outPath: String
    let tuningPath: String?

    init?(arguments: [String]) {
        guard let args = try? Args(Array(arguments.dropFirst())), let spec = args.options["spec"] else { return nil }
        let docs = FileManager.default.urls(for: .documentDirectory, in: .userDomainMask)[0]
        func resolve(_ p: String) -> String { p.hasPrefix("/") ? p : docs.appendingPathComponent(p).path }
        specPath = resolve(spec)
        outPath = args.options["out"].map(resolve)
            ?? docs.appendingPathComponent("results").appendingPathComponent((spec as NSString).lastPathComponent).path
        tuningPath = args.options["tuning"].map(resolve)
    }
}

final class ResignFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }
}

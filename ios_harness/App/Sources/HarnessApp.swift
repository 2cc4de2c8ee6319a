import Foundation
import HarnessCore
import SwiftUI
import UIKit

/// The app entry: UIKit lifecycle only. What the app does with its launch arguments (paths under
/// Documents, the trial, `--probe thermal`, the result file and the sentinel, exit codes) is
/// `AppLaunch` in HarnessCore, the code `harness app --container DIR -- ARGS` runs on a host.
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
        Console.lineBufferStdout()
        app.isIdleTimerDisabled = true
        // A backgrounded app loses the GPU: a resign during the run marks the trial interrupted.
        NotificationCenter.default.addObserver(forName: UIApplication.willResignActiveNotification, object: nil, queue: nil) {
            [resigned] _ in resigned.set()
        }
        let documents = FileManager.default.urls(for: .documentDirectory, in: .userDomainMask)[0]
        let launch = AppLaunch(arguments: Array(CommandLine.arguments.dropFirst()), documents: AppDocuments(root: documents.path))
        status = launch.summary
        guard launch.request != .idle else { return true }  // no work: show the build and wait
        let flag = resigned
        Thread.detachNewThread {
            let code = launch.run(
                factory: BuiltinEngines(), thermal: Thermal.platformProbe(),
                interrupted: { flag.isSet ? "the app resigned active during the run (GPU access lost)" : nil })
            exit(code)
        }
        return true
    }
}

final class ResignFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }
}

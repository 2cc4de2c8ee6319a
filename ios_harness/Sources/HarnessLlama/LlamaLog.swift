import Foundation
import llama

/// llama.cpp's log, routed once per process: warnings and errors go to stderr (a failed launch's
/// tail), debug and info lines are dropped (they would flood stderr per token), and the last error
/// lines are kept so a failed call can be reported with llama.cpp's own words.
enum LlamaLog {
    /// The last lines at warning level or above, newest last, at most `keep`.
    static func recent() -> String { Tail.shared.text() }

    /// Forgets the kept lines (before a call whose failure should carry only its own).
    static func clear() { Tail.shared.clear() }

    /// Installs the callback and initialises the backends; idempotent, thread-safe.
    static func start() { _ = started }

    private static let started: Bool = {
        llama_log_set({ level, text, _ in
            guard let text else { return }
            Tail.shared.add(level: level.rawValue, String(cString: text))
        }, nil)
        llama_backend_init()
        return true
    }()

    private final class Tail: @unchecked Sendable {
        static let shared = Tail()
        private let lock = NSLock()
        private var lines: [String] = []
        private var lastLevel: UInt32 = 0
        private let keep = 8

        func add(level: UInt32, _ text: String) {
            lock.lock()
            defer { lock.unlock() }
            // Level 5 (GGML_LOG_LEVEL_CONT) continues the previous line at its level.
            let effective = level == 5 ? lastLevel : level
            lastLevel = effective
            guard effective >= 3 else { return }  // 3 warn, 4 error
            FileHandle.standardError.write(Data(text.utf8))
            if level == 5, let last = lines.popLast() {
                lines.append(last + text)
            } else {
                lines.append(text)
            }
            if lines.count > keep { lines.removeFirst(lines.count - keep) }
        }

        func text() -> String {
            lock.lock()
            defer { lock.unlock() }
            return lines.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { !$0.isEmpty }.joined(separator: " | ")
        }

        func clear() {
            lock.lock()
            defer { lock.unlock() }
            lines.removeAll()
        }
    }
}

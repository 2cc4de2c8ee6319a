import Foundation
import llama

/// Which llama.cpp this build links: ggml's version and the llama.cpp commit it was built from
/// (`-dirty` when built from a source distribution with local changes, as llama-cpp-python's
/// vendored copy is), and the CPU and GPU features compiled in (`llama_print_system_info`).
public struct LlamaBuild: Encodable, Sendable {
    public let ggmlVersion: String
    public let commit: String
    public let systemInfo: String

    enum CodingKeys: String, CodingKey {
        case commit
        case ggmlVersion = "ggml_version"
        case systemInfo = "system_info"
    }

    public static var current: LlamaBuild {
        LlamaLog.start()
        return LlamaBuild(
            ggmlVersion: String(cString: ggml_version()), commit: String(cString: ggml_commit()),
            systemInfo: String(cString: llama_print_system_info()).trimmingCharacters(in: CharacterSet(charactersIn: " |")))
    }
}

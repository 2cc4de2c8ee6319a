/// Hand-rolled argv parsing: `--name value` options and bare flags, nothing else.
public struct Args: Sendable {
    public let command: String?
    public let options: [String: String]
    public let flags: Set<String>

    public struct Problem: Error, CustomStringConvertible {
        public let description: String
    }

    /// Parses `argv` without the program name. `flagNames` take no value.
    public init(_ argv: [String], flagNames: Set<String> = []) throws {
        var rest = argv[...]
        var command: String?
        if let first = rest.first, !first.hasPrefix("--") {
            command = first
            rest = rest.dropFirst()
        }
        var options: [String: String] = [:]
        var flags: Set<String> = []
        while let arg = rest.popFirst() {
            guard arg.hasPrefix("--"), arg.count > 2 else { throw Problem(description: "unexpected argument '\(arg)'") }
            let name = String(arg.dropFirst(2))
            if let eq = name.firstIndex(of: "=") {
                options[String(name[..<eq])] = String(name[name.index(after: eq)...])
            } else if flagNames.contains(name) {
                flags.insert(name)
            } else if let value = rest.popFirst() {
                options[name] = value
            } else {
                throw Problem(description: "option --\(name) needs a value")
            }
        }
        self.command = command
        self.options = options
        self.flags = flags
    }

    public func require(_ name: String) throws -> String {
        guard let v = options[name] else { throw Problem(description: "missing --\(name)") }
        return v
    }

    /// Fails on options outside `allowed`, so a typo is not silently ignored.
    public func only(_ allowed: Set<String>) throws {
        if let bad = options.keys.sorted().first(where: { !allowed.contains($0) }) {
            throw Problem(description: "unknown option --\(bad)")
        }
    }
}

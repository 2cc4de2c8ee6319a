/// Finds the kernels of preprocessed MSL (macros expanded, MSL attributes as written) and
/// writes the C++ glue that calls each one from the runtime: buffers by `[[buffer(n)]]` index,
/// position values by attribute. A parameter without an attribute, or with one the emulation
/// does not know, is an error naming the kernel and the parameter.
struct KernelScanner {
    struct Param: Equatable {
        enum Kind: Equatable {
            case buffer(index: Int, reference: Bool)
            case builtin(String)
        }

        let name: String
        let type: String
        let kind: Kind
    }

    struct Kernel: Equatable {
        let name: String
        let params: [Param]
        let maxThreads: Int
    }

    static let builtins: Set<String> = [
        "thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
        "threads_per_threadgroup", "threadgroups_per_grid", "threads_per_grid", "thread_index_in_threadgroup",
        "thread_index_in_simdgroup", "simdgroup_index_in_threadgroup", "simdgroups_per_threadgroup",
        "threads_per_simdgroup", "thread_execution_width",
    ]

    static let builtinTypes: Set<String> = ["uint", "ushort", "uint2", "uint3", "ushort2", "ushort3"]

    /// The kernels in `source`, in order of appearance (a declaration and its definition once).
    static func scan(_ source: String) throws -> [Kernel] {
        let tokens = tokenize(source)
        var kernels: [Kernel] = []
        var depth = 0
        var pending: [[String]] = []
        var i = 0
        while i < tokens.count {
            let t = tokens[i]
            if t == "{" { depth += 1 } else if t == "}" { depth -= 1 }
            if depth == 0 && t == "[" && i + 1 < tokens.count && tokens[i + 1] == "[" {
                let (attrs, next) = try attributes(tokens, from: i)
                pending += attrs
                i = next
                if attrs.contains(where: { $0.first == "kernel" }) {
                    let (k, after) = try kernel(tokens, from: i, attributes: pending)
                    if !kernels.contains(where: { $0.name == k.name }) { kernels.append(k) }
                    pending = []
                    i = after
                }
                continue
            }
            if depth == 0 && t == "kernel" {
                let (k, after) = try kernel(tokens, from: i + 1, attributes: pending)
                if !kernels.contains(where: { $0.name == k.name }) { kernels.append(k) }
                pending = []
                i = after
                continue
            }
            if depth == 0 && (t == ";" || t == "}") { pending = [] }
            i += 1
        }
        return kernels
    }

    /// `[[a, b(1), ...]]` starting at `from`: each attribute as its tokens; the index after `]]`.
    static func attributes(_ tokens: [String], from: Int) throws -> ([[String]], Int) {
        var i = from + 2
        var current: [String] = []
        var all: [[String]] = []
        var depth = 0
        while i + 1 < tokens.count {
            let t = tokens[i]
            if depth == 0 && t == "]" && tokens[i + 1] == "]" {
                if !current.isEmpty { all.append(current) }
                return (all, i + 2)
            }
            if t == "(" { depth += 1 } else if t == ")" { depth -= 1 }
            if depth == 0 && t == "," {
                all.append(current)
                current = []
            } else {
                current.append(t)
            }
            i += 1
        }
        throw MetalCPUError("unterminated [[attribute]] list")
    }

    /// A kernel declaration after the `kernel` keyword: `void NAME(params)`.
    static func kernel(_ tokens: [String], from: Int, attributes: [[String]]) throws -> (Kernel, Int) {
        var i = from
        var attrs = attributes
        while i + 1 < tokens.count && tokens[i] == "[" && tokens[i + 1] == "[" {
            let (more, next) = try self.attributes(tokens, from: i)
            attrs += more
            i = next
        }
        guard i + 2 < tokens.count, tokens[i] == "void", isIdentifier(tokens[i + 1]), tokens[i + 2] == "(" else {
            throw MetalCPUError("a kernel must be declared `kernel void NAME(...)` (near '\(tokens[from..<min(tokens.count, from + 6)].joined(separator: " "))')")
        }
        let name = tokens[i + 1]
        i += 3
        var params: [[String]] = [[]]
        var depth = 0
        while i < tokens.count {
            let t = tokens[i]
            if depth == 0 && t == ")" { break }
            if t == "(" || t == "[" || t == "<" || t == "{" { depth += 1 }
            if t == ")" || t == "]" || t == ">" || t == "}" { depth -= 1 }
            if depth == 0 && t == "," { params.append([]) } else { params[params.count - 1].append(t) }
            i += 1
        }
        guard i < tokens.count else { throw MetalCPUError("kernel \(name): unterminated parameter list") }
        params.removeAll { $0.isEmpty || $0 == ["void"] }
        var maxThreads = 0
        for a in attrs where a.first == "max_total_threads_per_threadgroup" {
            guard a.count == 4, let n = integer(a[2]) else {
                throw MetalCPUError("kernel \(name): max_total_threads_per_threadgroup needs an integer literal")
            }
            maxThreads = n
        }
        return (Kernel(name: name, params: try params.map { try param($0, kernel: name) }, maxThreads: maxThreads), i + 1)
    }

    static func param(_ tokens: [String], kernel: String) throws -> Param {
        guard let open = (0..<max(0, tokens.count - 1)).first(where: { tokens[$0] == "[" && tokens[$0 + 1] == "[" }) else {
            let text = tokens.joined(separator: " ")
            throw MetalCPUError("kernel \(kernel): parameter '\(text)' has no attribute; MetalCPU binds [[buffer(n)]] and thread-position attributes only")
        }
        let declarator = Array(tokens[..<open])
        guard let name = declarator.last, isIdentifier(name), declarator.count >= 2 else {
            throw MetalCPUError("kernel \(kernel): cannot read parameter '\(tokens.joined(separator: " "))'")
        }
        let type = declarator.dropLast().joined(separator: " ")
        let (attrs, _) = try attributes(tokens, from: open)
        guard attrs.count == 1, let attr = attrs.first, let word = attr.first else {
            throw MetalCPUError("kernel \(kernel): parameter '\(name)' needs exactly one attribute MetalCPU knows")
        }
        if word == "buffer" {
            guard attr.count == 4, attr[1] == "(", let index = integer(attr[2]), attr[3] == ")",
                  (0..<31).contains(index) else {
                throw MetalCPUError("kernel \(kernel): parameter '\(name)': [[buffer(n)]] needs an integer literal 0...30")
            }
            let last = declarator[declarator.count - 2]
            guard last == "*" || last == "&" else {
                throw MetalCPUError("kernel \(kernel): parameter '\(name)' is passed by value; MetalCPU binds pointers and `constant T &` only")
            }
            return Param(name: name, type: type, kind: .buffer(index: index, reference: last == "&"))
        }
        if builtins.contains(word) && attr.count == 1 {
            guard builtinTypes.contains(type) else {
                throw MetalCPUError("kernel \(kernel): parameter '\(name)' [[\(word)]] has type '\(type)'; MetalCPU takes \(builtinTypes.sorted().joined(separator: ", "))")
            }
            return Param(name: name, type: type, kind: .builtin(word == "thread_execution_width" ? "threads_per_simdgroup" : word))
        }
        throw MetalCPUError("kernel \(kernel): parameter '\(name)' has attribute [[\(attr.joined())]], which MetalCPU does not emulate")
    }

    /// The glue translation unit: includes the shader and lists its kernels for the runtime.
    static func glue(_ kernels: [Kernel], sourceFile: String) -> String {
        var out = "#include \"\(sourceFile)\"\n"
        var table: [String] = []
        for (k, kernel) in kernels.enumerated() {
            var args: [String] = []
            var index: [String] = [], minBytes: [String] = [], align: [String] = [], names: [String] = []
            for p in kernel.params {
                switch p.kind {
                case .buffer(let i, let reference):
                    let pointee = String(p.type.dropLast()).trimmingWhitespace
                    args.append(reference ? "*(\(pointee) *)__b[\(i)]" : "(\(p.type))__b[\(i)]")
                    index.append("\(i)")
                    minBytes.append(reference ? "sizeof(\(pointee))" : "0")
                    align.append(pointee == "void" || pointee.hasSuffix(" void") ? "1" : "alignof(\(pointee))")
                    names.append("\"\(p.name)\"")
                case .builtin(let field):
                    args.append("__mtlcpu::pos<\(p.type)>(__t->_\(field))")
                }
            }
            out += "static void __mtlcpu_glue_\(k)(void *const *__b, const mtlcpu_builtins *__t) {\n"
            out += "    (void)__b; (void)__t;\n"
            out += "    \(kernel.name)(\(args.joined(separator: ", ")));\n}\n"
            let n = index.count
            if n > 0 {
                out += "static const int __mtlcpu_index_\(k)[] = {\(index.joined(separator: ", "))};\n"
                out += "static const uint __mtlcpu_min_\(k)[] = {\(minBytes.joined(separator: ", "))};\n"
                out += "static const uint __mtlcpu_align_\(k)[] = {\(align.joined(separator: ", "))};\n"
                out += "static const char *const __mtlcpu_names_\(k)[] = {\(names.joined(separator: ", "))};\n"
            }
            let arrays = n > 0
                ? "__mtlcpu_index_\(k), __mtlcpu_min_\(k), __mtlcpu_align_\(k), __mtlcpu_names_\(k)"
                : "nullptr, nullptr, nullptr, nullptr"
            table.append("    {\"\(kernel.name)\", __mtlcpu_glue_\(k), \(n), \(arrays), \(kernel.maxThreads)}")
        }
        out += "extern \"C\" const mtlcpu_kernel_info __mtlcpu_kernels[] = {\n"
        out += (table + ["    {nullptr, nullptr, 0, nullptr, nullptr, nullptr, nullptr, 0}"]).joined(separator: ",\n")
        out += "\n};\n"
        out += "extern \"C\" const uint __mtlcpu_abi[4] = {1, sizeof(mtlcpu_builtins), sizeof(mtlcpu_api), sizeof(mtlcpu_kernel_info)};\n"
        out += "extern \"C\" void __mtlcpu_init(const mtlcpu_api *api) { __mtlcpu_rt = api; }\n"
        return out
    }

    // MARK: tokens

    /// C-family tokens of preprocessed text: identifiers, numbers, literals, one-character
    /// punctuation.
    static func tokenize(_ s: String) -> [String] {
        let chars = Array(s.unicodeScalars)
        var out: [String] = []
        var i = 0
        func isIdentStart(_ c: Unicode.Scalar) -> Bool { c == "_" || c.properties.isAlphabetic }
        func isIdent(_ c: Unicode.Scalar) -> Bool { isIdentStart(c) || ("0"..."9").contains(c) }
        while i < chars.count {
            let c = chars[i]
            if c.properties.isWhitespace {
                i += 1
            } else if c == "#" {
                // A line the preprocessor left (a #pragma): skip to its end.
                while i < chars.count && chars[i] != "\n" { i += 1 }
            } else if isIdentStart(c) || ("0"..."9").contains(c) {
                var j = i
                while j < chars.count && (isIdent(chars[j]) || (chars[j] == "." && ("0"..."9").contains(c))) { j += 1 }
                out.append(String(String.UnicodeScalarView(chars[i..<j])))
                i = j
            } else if c == "\"" || c == "'" {
                var j = i + 1
                while j < chars.count && chars[j] != c {
                    if chars[j] == "\\" { j += 1 }
                    j += 1
                }
                out.append(String(String.UnicodeScalarView(chars[i..<min(j + 1, chars.count)])))
                i = j + 1
            } else {
                out.append(String(c))
                i += 1
            }
        }
        return out
    }

    static func isIdentifier(_ t: String) -> Bool {
        guard let f = t.unicodeScalars.first else { return false }
        return (f == "_" || f.properties.isAlphabetic) && t.unicodeScalars.allSatisfy { $0 == "_" || $0.properties.isAlphabetic || ("0"..."9").contains($0) }
    }

    static func integer(_ t: String) -> Int? {
        Int(t.droppingSuffix(of: "uUlL"))
    }
}

extension String {
    var trimmingWhitespace: String {
        var s = Substring(self)
        while s.first?.isWhitespace == true { s = s.dropFirst() }
        while s.last?.isWhitespace == true { s = s.dropLast() }
        return String(s)
    }

    /// Drops trailing characters that are in `set` (integer suffixes).
    func droppingSuffix(of set: String) -> String {
        var s = Substring(self)
        while let l = s.last, set.contains(l) { s = s.dropLast() }
        return String(s)
    }
}

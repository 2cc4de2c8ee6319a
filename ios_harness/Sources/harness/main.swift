import Foundation
import HarnessCore
import HarnessCPU

let usage = """
    usage: harness run --spec FILE --out FILE [--tuning FILE]
           harness app --container DIR [-- APP-ARGS...]
           harness probe --out FILE [--threads N] [--mib N] [--repeats N] [--patterns a,b] [--kernels swift|avx2]
           harness info
    """

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("harness: \(message)\n\(usage)\n".utf8))
    exit(64)
}

/// `harness app`: the iOS app's logic with DIR as its data container (see `AppLaunch`). Its own
/// output follows the app's rules (stdout only, the app's exit codes); only a bad host command
/// line or a bad twin variable (`HARNESS_THERMAL_STATE`, Linux) is this CLI's error (exit 64).
func runApp(_ argv: [String]) -> Never {
    Console.lineBufferStdout()
    let host: AppHost
    let thermal: any ThermalProbe
    do {
        host = try AppHost(argv)
        thermal = try Thermal.appProbe(environment: ProcessInfo.processInfo.environment)
    } catch {
        fail("\(error)")
    }
    let launch = AppLaunch(arguments: host.arguments, documents: host.documents)
    let code = launch.run(factory: BuiltinEngines(), thermal: thermal)
    // An app launched without work stays up until it is killed; so does its stand-in.
    while launch.request == .idle { Thread.sleep(forTimeInterval: 3600) }
    exit(code)
}

let argv = Array(CommandLine.arguments.dropFirst())
if argv.first == "app" { runApp(Array(argv.dropFirst())) }

let args: Args
do {
    args = try Args(argv)
} catch {
    fail("\(error)")
}

switch args.command {
case "run":
    do {
        try args.only(["spec", "out", "tuning"])
        let code = SpecRun.execute(
            specPath: try args.require("spec"), outPath: try args.require("out"),
            tuningPath: args.options["tuning"], factory: BuiltinEngines())
        exit(code)
    } catch {
        fail("\(error)")
    }
case "probe":
    do {
        try args.only(["out", "threads", "mib", "repeats", "patterns", "kernels"])
        let out = try args.require("out")
        let host = HostInfo.current()
        guard let threads = Int(args.options["threads"] ?? String(host.logicalCpus)), threads >= 1 else { fail("bad --threads") }
        let bytes: Int
        if let mib = args.options["mib"] {
            guard let m = Int(mib), m >= 1 else { fail("bad --mib") }
            bytes = m << 20
        } else {
            bytes = StreamProbe.defaultBufferBytes(host: host)
        }
        guard let repeats = Int(args.options["repeats"] ?? "7"), repeats >= 1 else { fail("bad --repeats") }
        let patterns = args.options["patterns"].map { $0.split(separator: ",").map(String.init) }
        var probe = StreamProbe(threads: threads, bufferBytes: bytes, repeats: repeats)
        if let k = args.options["kernels"] {
            guard let family = KernelFamily(rawValue: k), family == .swift || family == .best else { fail("bad --kernels") }
            probe.kernels = family
        }
        let report = probe.run(host: host, patterns: patterns)
        try AtomicFile.write(ProtocolJSON.encoder().encode(report), to: out)
        for m in report.results {
            Console.line(m.pattern.padding(toLength: 12, withPad: " ", startingAt: 0) + String(format: " best %6.2f GB/s  median %6.2f GB/s", m.bestGBPerS, m.medianGBPerS))
        }
        Console.line("HARNESS_DONE probe \(out)")
    } catch {
        fail("\(error)")
    }
case "info":
    struct Info: Encodable {
        let harnessBuild: String
        let protocolSchemaVersion: Int
        let engines: [String]
        let metal: BuiltinEngines.MetalInfo?
        let llamacpp: (any Encodable)?
        let host: HostInfo
        enum CodingKeys: String, CodingKey {
            case engines, host, metal, llamacpp
            case harnessBuild = "harness_build"
            case protocolSchemaVersion = "protocol_schema_version"
        }

        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(harnessBuild, forKey: .harnessBuild)
            try c.encode(protocolSchemaVersion, forKey: .protocolSchemaVersion)
            try c.encode(engines, forKey: .engines)
            try c.encodeIfPresent(metal, forKey: .metal)
            if let llamacpp { try c.encode(llamacpp, forKey: .llamacpp) }
            try c.encode(host, forKey: .host)
        }
    }
    let info = Info(
        harnessBuild: HarnessBuild.id, protocolSchemaVersion: protocolSchemaVersion,
        engines: BuiltinEngines().engineNames, metal: BuiltinEngines.metal, llamacpp: BuiltinEngines.llamacpp,
        host: HostInfo.current())
    Console.line(String(decoding: try! ProtocolJSON.encoder(pretty: true).encode(info), as: UTF8.self))
default:
    fail(args.command.map { "unknown command '\($0)'" } ?? "no command")
}

import Foundation

/// A coding key for any string: lets a decoder list every key an object carries.
struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension Decoder {
    /// Rejects keys the type does not declare, as the Python models do (`extra="forbid"`).
    func rejectUnknownKeys<K: CodingKey & CaseIterable>(_ keys: K.Type) throws {
        let known = Set(K.allCases.map(\.stringValue))
        let container = try self.container(keyedBy: AnyKey.self)
        for key in container.allKeys where !known.contains(key.stringValue) {
            throw DecodingError.dataCorruptedError(
                forKey: key, in: container, debugDescription: "unknown field '\(key.stringValue)'")
        }
    }
}

/// A broken rule of the protocol beyond JSON types (a bound, a length, a consistency rule).
public struct ProtocolViolation: Error, CustomStringConvertible, Equatable {
    public let field: String
    public let reason: String
    public var description: String { "\(field): \(reason)" }
    public init(_ field: String, _ reason: String) {
        self.field = field
        self.reason = reason
    }
}

func require(_ ok: Bool, _ field: String, _ reason: @autoclosure () -> String) throws {
    if !ok { throw ProtocolViolation(field, reason()) }
}

/// Encoder and decoder configured for protocol JSON.
public enum ProtocolJSON {
    /// Sorted keys; compact unless `pretty` (results carry thousands of timestamps).
    public static func encoder(pretty: Bool = false) -> JSONEncoder {
        let e = JSONEncoder()
        e.outputFormatting = pretty ? [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        return e
    }

    public static func decoder() -> JSONDecoder { JSONDecoder() }
}

import Foundation
import Models
import Yams

/// Reads a YAML document into a `JSONValue`, as `scripts/lib/openapi_tool.py` reads it with PyYAML:
/// YAML 1.1's plain scalars resolved to null, booleans, integers and floats, quoted scalars always
/// strings, timestamps kept as the text they are (JSON has no dates), and mapping keys as written
/// (`200:` is the key "200").
public enum OpenAPIYAML {
    public static func parse(_ text: String) throws -> JSONValue {
        guard let root = try Yams.compose(yaml: text) else { return .null }
        return try value(of: root)
    }

    static func value(of node: Node) throws -> JSONValue {
        switch node {
        case .scalar(let scalar):
            switch node.tag.rawValue {
            case Tag.Name.null.rawValue:
                return .null
            case Tag.Name.bool.rawValue:
                return node.bool.map(JSONValue.bool) ?? .string(scalar.string)
            case Tag.Name.int.rawValue:
                return node.int.map { JSONValue.number(Double($0)) } ?? .string(scalar.string)
            case Tag.Name.float.rawValue:
                return node.float.map(JSONValue.number) ?? .string(scalar.string)
            default:
                return .string(scalar.string)
            }
        case .mapping(let mapping):
            var object: [String: JSONValue] = [:]
            for (key, value) in mapping {
                guard case .scalar(let name) = key else {
                    throw YAMLShapeError(description: "a mapping key that is not a scalar, at line \(key.mark?.line ?? 0)")
                }
                object[name.string] = try Self.value(of: value)
            }
            return .object(object)
        case .sequence(let sequence):
            return .array(try sequence.map { try Self.value(of: $0) })
        case .alias(let alias):
            // The parser puts the anchored node in place of each alias; one left over is not JSON.
            throw YAMLShapeError(description: "an alias (*\(alias.anchor.rawValue)) the parser did not resolve")
        }
    }
}

/// YAML that parses but has no JSON form.
struct YAMLShapeError: Error, CustomStringConvertible {
    var description: String
}

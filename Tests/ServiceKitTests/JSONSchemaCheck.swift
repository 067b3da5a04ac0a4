import Foundation

/// The part of JSON Schema (draft 2020-12) the event schemas use: `type`, `properties`, `required`,
/// `additionalProperties`, `items`, `enum`, `pattern`, `minimum`, `minLength`, `anyOf` and local
/// `$ref`s into `$defs`. A keyword it does not know fails the check rather than pass unread; the
/// end-to-end run validates with Python's `jsonschema` too, which knows all of them.
struct JSONSchemaCheck {
    let root: [String: Any]
    /// An object's key that its schema's `properties` does not name is an error, whatever
    /// `additionalProperties` says: what a publisher writes must be in its newest schema.
    var strict = false

    init(_ schema: [String: Any], strict: Bool = false) {
        self.root = schema
        self.strict = strict
    }

    init(file: URL, strict: Bool = false) throws {
        guard let schema = try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any] else {
            throw CheckError(description: "\(file.lastPathComponent) is not a JSON object")
        }
        self.init(schema, strict: strict)
    }

    struct CheckError: Error, CustomStringConvertible {
        var description: String
    }

    static let known: Set<String> = [
        "$schema", "$id", "$defs", "$ref", "title", "description", "type", "properties", "required", "additionalProperties", "items", "enum",
        "pattern", "minimum", "minLength", "anyOf", "format", "default", "examples",
    ]

    /// The problems of `value` against the schema, each with its path; empty when it is valid.
    func problems(_ value: Any) -> [String] {
        var found: [String] = []
        check(value, root, path: "$", &found)
        return found
    }

    private func check(_ value: Any, _ schema: [String: Any], path: String, _ found: inout [String]) {
        for key in schema.keys where !Self.known.contains(key) { found.append("\(path): the check does not know the keyword \(key)") }
        if let ref = schema["$ref"] as? String {
            let name = ref.hasPrefix("#/$defs/") ? String(ref.dropFirst(8)) : ""
            if let target = (root["$defs"] as? [String: Any])?[name] as? [String: Any] {
                check(value, target, path: path, &found)
            } else {
                found.append("\(path): cannot resolve \(ref)")
            }
        }
        if let options = schema["anyOf"] as? [[String: Any]] {
            let fits = options.contains { option in
                var inner: [String] = []
                check(value, option, path: path, &inner)
                return inner.isEmpty
            }
            if !fits { found.append("\(path): matches none of anyOf") }
        }
        if let type = schema["type"] {
            let types = (type as? [String]) ?? [type as? String ?? ""]
            if !types.contains(where: { Self.value(value, is: $0) }) { found.append("\(path): \(Self.describe(value)) is not \(types.joined(separator: " or "))") }
        }
        if let allowed = schema["enum"] as? [Any], !allowed.contains(where: { Self.same($0, value) }) {
            found.append("\(path): \(value) is not one of \(allowed)")
        }
        if let text = value as? String {
            if let pattern = schema["pattern"] as? String, text.range(of: pattern, options: .regularExpression) == nil {
                found.append("\(path): \"\(text)\" does not match \(pattern)")
            }
            if let least = schema["minLength"] as? Int, text.count < least { found.append("\(path): shorter than \(least)") }
        }
        if let number = value as? NSNumber, !Self.isBool(value), let minimum = schema["minimum"] as? Double, number.doubleValue < minimum {
            found.append("\(path): \(number) is below \(minimum)")
        }
        if let object = value as? [String: Any] {
            for name in schema["required"] as? [String] ?? [] where object[name] == nil { found.append("\(path): \(name) is missing") }
            let properties = schema["properties"] as? [String: Any] ?? [:]
            for (key, item) in object {
                if let property = properties[key] as? [String: Any] {
                    check(item, property, path: "\(path).\(key)", &found)
                } else if let additional = schema["additionalProperties"] as? [String: Any] {
                    check(item, additional, path: "\(path).\(key)", &found)
                } else if schema["additionalProperties"] as? Bool == false || (strict && schema["properties"] != nil) {
                    found.append("\(path): \(key) is not in the schema")
                }
            }
        }
        if let array = value as? [Any], let items = schema["items"] as? [String: Any] {
            for (index, item) in array.enumerated() { check(item, items, path: "\(path)[\(index)]", &found) }
        }
    }

    /// Equal JSON scalars (the schemas' `enum`s hold strings and numbers).
    private static func same(_ a: Any, _ b: Any) -> Bool {
        if let a = a as? String, let b = b as? String { return a == b }
        if let a = a as? NSNumber, let b = b as? NSNumber { return a == b && isBool(a) == isBool(b) }
        return a is NSNull && b is NSNull
    }

    private static func isBool(_ value: Any) -> Bool {
        // JSONSerialization reads `true` and `false` as NSNumbers of a Bool, whose type code is `c`.
        guard let number = value as? NSNumber else { return false }
        return String(cString: number.objCType) == "c"
    }

    private static func value(_ value: Any, is type: String) -> Bool {
        switch type {
        case "null": return value is NSNull
        case "boolean": return isBool(value)
        case "integer":
            guard let number = value as? NSNumber, !isBool(value) else { return false }
            return number.doubleValue == number.doubleValue.rounded()
        case "number": return value is NSNumber && !isBool(value)
        case "string": return value is String
        case "array": return value is [Any]
        case "object": return value is [String: Any]
        default: return false
        }
    }

    private static func describe(_ value: Any) -> String {
        if value is NSNull { return "null" }
        if isBool(value) { return "a boolean" }
        if value is NSNumber { return "a number" }
        if value is String { return "a string" }
        if value is [Any] { return "an array" }
        return "an object"
    }
}

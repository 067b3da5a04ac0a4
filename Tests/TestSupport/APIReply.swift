import Foundation
import HTTPTypes
import NIOCore

/// A response of a service under test, with the ways tests read it.
public struct APIReply: Sendable {
    public let status: HTTPResponse.Status
    public let headers: HTTPFields
    public let body: ByteBuffer

    public init(status: HTTPResponse.Status, headers: HTTPFields, body: ByteBuffer) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(buffer: body))) as? [String: Any] ?? [:] }
    /// The problem's `code`.
    public var code: String? { json["code"] as? String }
    public var text: String { String(buffer: body) }
    /// The `items` of a list.
    public var items: [[String: Any]] { json["items"] as? [[String: Any]] ?? [] }
    /// Ids of the list items, lower case.
    public var ids: [String] { items.compactMap { ($0["id"] as? String)?.lowercased() } }
    /// The fields named by a validation problem.
    public var fieldErrors: [String] { (json["errors"] as? [[String: Any]] ?? []).compactMap { $0["field"] as? String } }
}

extension Dictionary where Key == String, Value == Any {
    /// A value down a dotted path of nested objects, numbers indexing arrays:
    /// `json[path: "relationship.following"]`, `item[path: "blocks.0.sets.1.reps"]`.
    public subscript(path path: String) -> Any? {
        var current: Any? = self
        for part in path.split(separator: ".") {
            if let index = Int(part), let array = current as? [Any] {
                current = array.indices.contains(index) ? array[index] : nil
            } else {
                current = (current as? [String: Any])?[String(part)]
            }
        }
        return current
    }
}

/// The operations a service's `openapi.yaml` documents, read line by line (paths at two spaces of
/// indent, methods at four), for the contract tests.
public enum OpenAPIDocument {
    public static func operations(of service: String) throws -> [(method: String, path: String)] {
        let text = try String(contentsOf: TestEnvironment.packageRoot.appendingPathComponent("Services/\(service)/openapi.yaml"), encoding: .utf8)
        var operations: [(String, String)] = []
        var path: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("  /"), line.hasSuffix(":") { path = String(line.dropFirst(2).dropLast()); continue }
            if line.hasPrefix("components:") { path = nil }
            if let path, let method = ["get", "post", "put", "patch", "delete"].first(where: { line == "    \($0):" }) {
                operations.append((method, path))
            }
        }
        return operations
    }
}

/// `text` (compact JSON) with every string that is an uppercase UUID lowercased: what the API
/// writes (`APIJSON`) where Foundation's `JSONEncoder` writes uppercase, so the two can be compared.
/// A string opens at the start or after `[`, `{`, `,` or `:`; a quote after a backslash is in one.
public func lowercasingUUIDs(_ text: String) -> String {
    let pattern = try! Regex(#"(^|[\[{,:])("[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}")"#)
    return text.replacing(pattern) { match in
        (match.output[1].substring.map(String.init) ?? "") + (match.output[2].substring.map { $0.lowercased() } ?? "")
    }
}

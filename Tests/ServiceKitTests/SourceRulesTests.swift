import Foundation
import TestSupport
import Testing

/// Rules of the code that the types do not hold, read from the source: every statement of the
/// services goes through ServiceKit's checked calls (`withConnectionOnItsLoop`, `checkedQuery`,
/// `checkedExecute`), which cannot hang on a connection PostgreSQL dropped, never through PostgresNIO's
/// own, which stay public on the `PostgresClient` and `PostgresConnection` the services hold; and every
/// JSON body a route decodes with Hummingbird's `decode(as:context:)`, which takes any `Decodable`,
/// refuses keys it does not know. (ServiceKit's `decodeIfPresent(as:context:)` takes only a
/// `StrictJSONBody`, so the compiler holds that one.)
@Suite struct SourceRulesTests {
    @Test func everyStatementGoesThroughTheCheckedCalls() throws {
        let unchecked = [".query(", ".execute(", ".withConnection {", ".withConnection(", ".withTransaction("]
        // The gateway's upstream pool and the token verifier's HTTP client have `execute` methods of their own.
        let otherExecutes = ["pool.execute(", "httpClient.execute("]
        // The two files that take the leases the checked calls run on.
        let leasing = ["ConnectionLoop.swift", "DatabaseBudget.swift"]
        let root = TestEnvironment.packageRoot
        var found: [String] = []
        for folder in ["Services", "Shared"] {
            let files = FileManager.default.enumerator(at: root.appendingPathComponent(folder), includingPropertiesForKeys: nil)!
            for case let file as URL in files where file.pathExtension == "swift" && !leasing.contains(file.lastPathComponent) {
                let lines = try String(contentsOf: file, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
                for (number, line) in lines.enumerated() where !line.trimmingCharacters(in: .whitespaces).hasPrefix("//") {
                    guard unchecked.contains(where: line.contains), !otherExecutes.contains(where: line.contains) else { continue }
                    found.append("\(file.path.dropFirst(root.path.count + 1)):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))")
                }
            }
        }
        #expect(found.isEmpty, "unchecked statements:\n\(found.joined(separator: "\n"))")
    }

    /// A route decodes its body as a `StrictJSONBody` (unknown keys refused), or as a `JSONValue` that it
    /// checks key by key itself (`PATCH /v1/profiles/me`).
    @Test func everyDecodedBodyRefusesUnknownKeys() throws {
        let root = TestEnvironment.packageRoot
        let decoded = try Regex(#"\.decode\(as: ([A-Za-z.]+)\.self"#)
        var sources = ""
        var names: [(String, String)] = []
        let files = FileManager.default.enumerator(at: root.appendingPathComponent("Services"), includingPropertiesForKeys: nil)!
        for case let file as URL in files where file.pathExtension == "swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            sources += text
            for match in text.matches(of: decoded) {
                // A qualified name (`Routes.Body`) is checked by its last part.
                names.append((String(text[match.output[1].range!].split(separator: ".").last ?? ""), file.lastPathComponent))
            }
        }
        #expect(names.count >= 14, "the rule found the routes' decodes")
        let open = names.filter { name, _ in name != "JSONValue" && !sources.contains("struct \(name): StrictJSONBody") }
        #expect(open.isEmpty, "bodies that ignore unknown keys: \(open)")
    }
}

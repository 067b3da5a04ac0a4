import Foundation
import TestSupport
import Testing

/// Rules of the code that a compiler cannot hold: every statement of the services goes through
/// ServiceKit's checked calls (`withConnectionOnItsLoop`, `checkedQuery`, `checkedExecute`), which
/// cannot hang on a connection PostgreSQL dropped, never through PostgresNIO's own.
@Suite struct SourceRulesTests {
    @Test func everyStatementGoesThroughTheCheckedCalls() throws {
        let unchecked = [".query(", ".execute(", ".withConnection {", ".withConnection(", ".withTransaction("]
        // The gateway's upstream pool and the token verifier's HTTP client have `execute` methods of their own.
        let otherExecutes = ["pool.execute(", "httpClient.execute("]
        let root = TestEnvironment.packageRoot
        var found: [String] = []
        for folder in ["Services", "Shared"] {
            let files = FileManager.default.enumerator(at: root.appendingPathComponent(folder), includingPropertiesForKeys: nil)!
            for case let file as URL in files where file.pathExtension == "swift" && file.lastPathComponent != "ConnectionLoop.swift" {
                let lines = try String(contentsOf: file, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
                for (number, line) in lines.enumerated() where !line.trimmingCharacters(in: .whitespaces).hasPrefix("//") {
                    guard unchecked.contains(where: line.contains), !otherExecutes.contains(where: line.contains) else { continue }
                    found.append("\(file.path.dropFirst(root.path.count + 1)):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))")
                }
            }
        }
        #expect(found.isEmpty, "unchecked statements:\n\(found.joined(separator: "\n"))")
    }
}

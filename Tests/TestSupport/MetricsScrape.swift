import Foundation
import NIOCore

/// Reads one sample of a process's `/metrics`, served on its internal port: tests count what a
/// service did (signatures checked, cards drawn) from the metric it keeps for operators.
public enum MetricsScrape {
    /// The sum of every sample of `name` (all its label sets), or nil when the process has none.
    public static func value(_ name: String, port: Int) async throws -> Double? {
        let reply = try await ConcurrentClient.send(port: port, "GET", "/metrics")
        guard reply.status == 200 else { return nil }
        var total: Double?
        for line in String(buffer: reply.body).split(separator: "\n") where !line.hasPrefix("#") {
            guard line.hasPrefix(name) else { continue }
            let rest = line.dropFirst(name.count)
            guard rest.first == " " || rest.first == "{" else { continue }
            guard let text = rest.split(separator: " ").last, let value = Double(text) else { continue }
            total = (total ?? 0) + value
        }
        return total
    }
}

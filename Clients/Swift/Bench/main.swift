import FoodBackendAPI
import FoodBackendClient
import Foundation

/// The client's profile read against a running gateway, as scripts/bench/client drives it:
/// `ClientBench URL ACCESS_TOKEN REFRESH_TOKEN CONNECTIONS SECONDS` prints one JSON line with the
/// requests a second, the mean and the p99 latency, each request a full generated call through the
/// layer (token, problem mapping, decoding of the profile).
let arguments = CommandLine.arguments
guard arguments.count == 6, let url = URL(string: arguments[1]), let connections = Int(arguments[4]), let seconds = Double(arguments[5]) else {
    FileHandle.standardError.write(Data("usage: ClientBench URL ACCESS_TOKEN REFRESH_TOKEN CONNECTIONS SECONDS\n".utf8))
    exit(2)
}
let backend = FoodBackend(
    baseURL: url, tokenStore: InMemoryTokenStore(StoredTokens(accessToken: arguments[2], refreshToken: arguments[3])),
    configuration: .init(retry: .none))

func run(for duration: Duration) async throws -> [Duration] {
    let clock = ContinuousClock()
    let deadline = clock.now + duration
    return try await withThrowingTaskGroup(of: [Duration].self) { group in
        for _ in 0..<connections {
            group.addTask {
                var latencies: [Duration] = []
                while clock.now < deadline {
                    let started = clock.now
                    _ = try await backend.send { try await $0.getV1ProfilesMe().ok.body.json }
                    latencies.append(clock.now - started)
                }
                return latencies
            }
        }
        return try await group.reduce(into: []) { $0 += $1 }
    }
}

// A warm-up, so the connections are open and the code paths hot, as they are in wrk's run.
_ = try await run(for: .seconds(1))
let latencies = try await run(for: .seconds(seconds)).sorted()
let micros = latencies.map { Double($0.components.seconds) * 1e6 + Double($0.components.attoseconds) / 1e12 }
let mean = micros.reduce(0, +) / Double(max(1, micros.count))
let p99 = micros.isEmpty ? 0 : micros[min(micros.count - 1, Int(Double(micros.count) * 0.99))]
print(#"{"requests": \#(micros.count), "requests_per_second": \#(Double(micros.count) / seconds), "mean_us": \#(mean), "p99_us": \#(p99)}"#)

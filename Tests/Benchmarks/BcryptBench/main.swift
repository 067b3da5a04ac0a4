import Foundation
import HummingbirdBcrypt
import Synchronization

/// The raw bcrypt rate on this machine, for `scripts/bench/auth` to set login throughput beside:
/// `BcryptBench --cost 10 --threads 2 --seconds 10` prints `bcrypt_verify_per_second <n>`.
/// It verifies (what a login does) with the same library and cost, on as many threads as the
/// service's thread pool has.
let arguments = CommandLine.arguments
func option(_ name: String, _ fallback: Int) -> Int {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count, let value = Int(arguments[index + 1]) else { return fallback }
    return value
}
let cost = option("--cost", 10)
let threads = option("--threads", ProcessInfo.processInfo.activeProcessorCount)
let seconds = option("--seconds", 10)
let hash = Bcrypt.hash("bench password 1", cost: UInt8(cost))
let counts = Mutex([Int](repeating: 0, count: threads))
let deadline = Date().addingTimeInterval(TimeInterval(seconds))
let group = DispatchGroup()
let start = Date()
for thread in 0..<threads {
    group.enter()
    Thread.detachNewThread {
        var done = 0
        while Date() < deadline {
            _ = Bcrypt.verify("bench password 1", hash: hash)
            done += 1
        }
        counts.withLock { $0[thread] = done }
        group.leave()
    }
}
group.wait()
let elapsed = Date().timeIntervalSince(start)
let total = counts.withLock { $0.reduce(0, +) }
print(String(format: "bcrypt_verify_per_second %.1f (cost %d, %d threads, %d verifies in %.1f s)", Double(total) / elapsed, cost, threads, total, elapsed))

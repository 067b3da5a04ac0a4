import Foundation
import NIOCore
import NIOPosix
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import Synchronization

/// A redis-server process of a test's own, for tests that stop and restart Redis mid-test.
public final class RedisServer: @unchecked Sendable {
    public private(set) var port: Int
    private let directory: URL
    private var process: ChildProcess?
    private var started = false
    private var starts = 0
    /// Arguments after the defaults (`--replicaof 127.0.0.1 6379`).
    private let extraArguments: [String]
    /// A sentinel watching this primary, named thus, rather than a server.
    private let sentinelOf: (name: String, port: Int)?

    public init(extraArguments: [String] = []) throws {
        port = try Self.freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent(TestEnvironment.uniqueName("redis"))
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        self.extraArguments = extraArguments
        sentinelOf = nil
    }

    /// A Redis Sentinel that watches the primary at `primaryPort` as `name`, with a quorum of two, and
    /// fails it over half a second after it stops answering.
    public init(sentinelOf name: String, primaryPort: Int) throws {
        port = try Self.freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent(TestEnvironment.uniqueName("sentinel"))
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        extraArguments = []
        sentinelOf = (name, primaryPort)
    }

    public var configuration: RedisConfiguration {
        RedisConfiguration(host: "127.0.0.1", port: port, poolSize: 2, commandTimeout: .seconds(2), backoffBase: .milliseconds(20), backoffMax: .milliseconds(200))
    }

    /// Starts the server and waits until it answers; again on the same port after `stop`. The first
    /// start moves to another free port if its own was taken before the server could bind it.
    public func start() async throws {
        let restart = started
        for _ in 0..<5 {
            // A log for each start, since redis-server appends: the marker must be this start's own.
            starts += 1
            let log = directory.appendingPathComponent("redis-\(starts).log").path
            let arguments: [String]
            let marker: String
            if let sentinelOf {
                // A sentinel rewrites its configuration file: one of its own, written afresh.
                let file = directory.appendingPathComponent("sentinel-\(starts).conf")
                let settings = [
                    "port \(port)", "bind 127.0.0.1", "dir \(directory.path)", "logfile \(log)",
                    "sentinel monitor \(sentinelOf.name) 127.0.0.1 \(sentinelOf.port) 2",
                    "sentinel down-after-milliseconds \(sentinelOf.name) 500",
                    "sentinel failover-timeout \(sentinelOf.name) 2000",
                    "sentinel parallel-syncs \(sentinelOf.name) 1",
                ]
                try (settings.joined(separator: "\n") + "\n").write(to: file, atomically: true, encoding: .utf8)
                arguments = ["redis-server", file.path, "--sentinel"]
                marker = "+monitor master"
            } else {
                arguments =
                    [
                        "redis-server", "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
                        "--appendfsync", "always", "--dir", directory.path, "--logfile", log,
                    ] + extraArguments
                marker = "Ready to accept connections"
            }
            let child = try ChildProcess(arguments)
            if try await child.waitUntilServing(port: port, log: log, marker: marker) {
                process = child
                started = true
                return
            }
            guard !restart else { break }
            port = try Self.freePort()
        }
        throw RedisError.unavailable("test redis-server on port \(port) did not start (port in use?)")
    }

    /// Stops the server without closing anything (SIGSTOP), as a host gone or a partition looks to
    /// its clients: connections stay open and nothing comes down them, until `resume`.
    public func pause() { process?.signal(SIGSTOP) }

    public func resume() { process?.signal(SIGCONT) }

    /// Kills the server as a crash would (SIGKILL) and waits until the port is closed.
    public func stop() async throws {
        guard let process else { return }
        process.signal(SIGKILL)
        try await process.wait()
        self.process = nil
        // Until the port is free, two seconds at most: the first refused connection ends the wait
        // (each attempt may take up to its connect timeout on a loaded machine).
        for _ in 0..<100 {
            guard await Self.accepts(port: port) else { break }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    deinit {
        process?.signal(SIGKILL)
        try? FileManager.default.removeItem(at: directory)
    }

    /// Whether something listens on the loopback port and completes a connection within a second.
    /// Asynchronous, through NIO: it is called from tasks, and a blocking `connect` to a listener whose
    /// queue is full waits for the kernel's SYN retries (over two minutes) on one of the two threads
    /// every task of the test process shares, while the accept loops that would empty those queues
    /// are tasks waiting for a thread: the whole suite once stood still for that long.
    public static func accepts(port: Int) async -> Bool {
        do {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.seconds(1))
                .connect(host: "127.0.0.1", port: port).get()
            try? await channel.close()
            return true
        } catch {
            return false
        }
    }

    /// A free loopback port below the kernel's ephemeral range, as `scripts/lib/ports.py` chooses
    /// them. A port from the ephemeral range can be taken as the source port of any outgoing
    /// connection before the server it was meant for listens, and a probe of it can even connect to
    /// itself (TCP's simultaneous open), so `accepts(port:)` said yes to a server that was not there:
    /// the gateway's shutdown test once failed on such a port with "connection reset by peer".
    /// A port is handed out once per test process: a test may hold one for seconds before its
    /// server binds it (a Redis started later, a listener still booting), and a parallel test given
    /// the same port would bind it first and answer in its place, as the listener's shutdown test
    /// once saw (its own bind refused, its probes answered by another test's server).
    public static func freePort() throws -> Int {
        let low =
            (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8))
            .flatMap { $0.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } } ?? 32768
        for _ in 0..<500 {
            let port = low > 20100 ? Int.random(in: 20000..<low) : 0
            guard let bound = bindable(port) else { continue }
            if handedOut.withLock({ $0.insert(bound).inserted }) { return bound }
        }
        throw RedisError.unavailable("no free port below the ephemeral range")
    }

    /// Every port `freePort()` has returned in this process.
    private static let handedOut = Mutex<Set<Int>>([])

    /// The port, once it could be bound on 127.0.0.1 (0 for one the kernel picks), or nil.
    private static func bindable(_ port: Int) -> Int? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Bool in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        return bound ? Int(UInt16(bigEndian: address.sin_port)) : nil
    }
}

import Foundation
import NIOCore
import NIOPosix
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis

/// A redis-server process of a test's own, for tests that stop and restart Redis mid-test.
public final class RedisServer: @unchecked Sendable {
    public private(set) var port: Int
    private let directory: URL
    private var process: ChildProcess?
    private var started = false
    private var starts = 0

    public init() throws {
        port = try Self.freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent(TestEnvironment.uniqueName("redis"))
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
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
            let child = try ChildProcess([
                "redis-server", "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
                "--appendfsync", "always", "--dir", directory.path, "--logfile", log,
            ])
            if try await child.waitUntilServing(port: port, log: log, marker: "Ready to accept connections") {
                process = child
                started = true
                return
            }
            guard !restart else { break }
            port = try Self.freePort()
        }
        throw RedisError.unavailable("test redis-server on port \(port) did not start (port in use?)")
    }

    /// Kills the server as a crash would (SIGKILL) and waits until the port is closed.
    public func stop() async throws {
        guard let process else { return }
        process.signal(SIGKILL)
        try await process.wait()
        self.process = nil
        for _ in 0..<100 where await Self.accepts(port: port) {
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
    public static func freePort() throws -> Int {
        let low =
            (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8))
            .flatMap { $0.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } } ?? 32768
        for _ in 0..<500 {
            let port = low > 20100 ? Int.random(in: 20000..<low) : 0
            if let bound = bindable(port) { return bound }
        }
        throw RedisError.unavailable("no free port below the ephemeral range")
    }

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

import CGlibcExtras
import Foundation
import Synchronization

/// A child process started with `posix_spawn` and reaped with `waitpid`, polled from async code.
/// Foundation's `Process.waitUntilExit` hung inside the test runner's cooperative threads, and its
/// `terminate` does not help with a child that must be killed hard.
public final class ChildProcess: Sendable {
    public let pid: pid_t
    /// The exit status once reaped. Reaped under the lock: a second `waitpid` would fail and lose it.
    private let status = Mutex<Int32?>(nil)

    /// Starts `arguments[0]` (looked up in PATH) with the given environment; output goes to `outputPath`.
    public init(_ arguments: [String], environment: [String: String]? = nil, outputPath: String = "/dev/null") throws {
        var fileActions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&fileActions)
        defer { posix_spawn_file_actions_destroy(&fileActions) }
        posix_spawn_file_actions_addopen(&fileActions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&fileActions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&fileActions, 1, 2)
        // The child gets stdin, stdout and stderr, nothing else. Sockets the test process opens
        // (SwiftNIO's among them) are not all close-on-exec: a child spawned while another test had
        // a connection open kept a copy of it, so closing that connection sent no FIN while the
        // child lived. A pool test then sent a request into a connection its upstream had closed
        // and waited for a response that never came (the "stalls" of 5-20 s in full parallel runs;
        // `ss -p` showed the mail sink's python holding both ends and the listening socket).
        guard cge_spawn_close_from(&fileActions, 3) == 0 else { throw POSIXError(.EINVAL) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Children get default signal handling whatever the test runner set up for itself.
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGPIPE, SIGCHLD] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var emptyMask = sigset_t()
        sigemptyset(&emptyMask)
        posix_spawnattr_setsigmask(&attributes, &emptyMask)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        let env = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        var envp: [UnsafeMutablePointer<CChar>?] = env.map { strdup($0) } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var child: pid_t = 0
        let result = posix_spawnp(&child, arguments[0], &fileActions, &attributes, &argv, &envp)
        guard result == 0 else {
            throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EINVAL)
        }
        pid = child
    }

    /// Waits for the child to exit and returns its exit status (128 + signal when killed).
    @discardableResult
    public func wait(timeout: Duration = .seconds(30)) async throws -> Int32 {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let status = reaped() { return status }
            if ContinuousClock.now > deadline { throw POSIXError(.ETIMEDOUT) }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    public func signal(_ signal: Int32) {
        kill(pid, signal)
    }

    /// Whether the child has exited, reaping it if so.
    public func hasExited() -> Bool { reaped() != nil }

    /// The exit status (128 + signal when killed) once the child has exited, reaping it if need be.
    private func reaped() -> Int32? {
        status.withLock { status in
            if status == nil {
                var raw: Int32 = 0
                let reaped = waitpid(pid, &raw, WNOHANG)
                if reaped == pid {
                    let signal = raw & 0x7f
                    status = signal == 0 ? (raw >> 8) & 0xff : 128 + signal
                } else if reaped < 0 {
                    status = -1
                }
            }
            return status
        }
    }

    /// Waits until the child, a server, has written `marker` to `log`, which it does once its port is
    /// bound, and `port` accepts connections. False when the child exits
    /// first, as one whose port was taken does: a port from `RedisServer.freePort()` is free only until
    /// someone binds it, and another test's server may bind it first and then answer in the child's
    /// place, so a connection alone does not prove the child is the one listening. The limit is
    /// generous: at the start of a parallel run dozens of servers (Redis, the Python mail sinks) start
    /// at once on two cores, and a sink once took longer than ten seconds to print its line.
    public func waitUntilServing(port: Int, log: String, marker: String, within limit: Duration = .seconds(45)) async throws -> Bool {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            if hasExited() { return false }
            if let text = FileManager.default.contents(atPath: log), String(decoding: text, as: UTF8.self).contains(marker),
                await RedisServer.accepts(port: port)
            {
                return true
            }
            try await Task.sleep(for: .milliseconds(25))
        }
        signal(SIGKILL)
        _ = try? await wait(timeout: .seconds(2))
        throw POSIXError(.ETIMEDOUT)
    }
}

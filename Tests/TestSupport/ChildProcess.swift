import Foundation

/// A child process started with `posix_spawn` and reaped with `waitpid`, polled from async code.
/// Foundation's `Process.waitUntilExit` hung inside the test runner's cooperative threads, and its
/// `terminate` does not help with a child that must be killed hard.
public final class ChildProcess: @unchecked Sendable {
    public let pid: pid_t
    private var status: Int32?

    /// Starts `arguments[0]` (looked up in PATH) with the given environment; output goes to `outputPath`.
    public init(_ arguments: [String], environment: [String: String]? = nil, outputPath: String = "/dev/null") throws {
        var fileActions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&fileActions)
        defer { posix_spawn_file_actions_destroy(&fileActions) }
        posix_spawn_file_actions_addopen(&fileActions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&fileActions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&fileActions, 1, 2)
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
            if let status { return status }
            var raw: Int32 = 0
            let reaped = waitpid(pid, &raw, WNOHANG)
            if reaped == pid {
                let signal = raw & 0x7f
                let code = signal == 0 ? (raw >> 8) & 0xff : 128 + signal
                status = code
                return code
            }
            if reaped < 0 { status = -1; return -1 }
            if ContinuousClock.now > deadline { throw POSIXError(.ETIMEDOUT) }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    public func signal(_ signal: Int32) {
        kill(pid, signal)
    }
}

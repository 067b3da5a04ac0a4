import Foundation

/// The version a process was built as, for `<executable> --version`: the first line of the file
/// `VERSION` beside the executable, which the Dockerfile writes from its `VERSION` build argument
/// (`git describe` of the tree it was given). A build made elsewhere (`swift build`, `scripts/stack`)
/// has no such file and says so.
public enum BuildVersion {
    public static let unversioned = "unversioned (built outside the Dockerfile)"

    /// The version read beside the running executable.
    public static var current: String { read(besideExecutable: executablePath()) }

    /// The version read from `VERSION` in the folder of `executable`.
    package static func read(besideExecutable executable: String) -> String {
        let file = URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("VERSION")
        guard let text = try? String(contentsOf: file, encoding: .utf8),
            let line = text.split(whereSeparator: \.isNewline).first?.trimmingCharacters(in: .whitespaces), !line.isEmpty
        else { return unversioned }
        return line
    }

    /// The executable's own path (`/proc/self/exe`), so that a copy started through a symbolic link or
    /// from `PATH` still finds its folder.
    static func executablePath() -> String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    }
}

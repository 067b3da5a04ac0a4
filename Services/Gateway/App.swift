import Foundation
import ServiceKit

@main
enum GatewayMain {
    static func main() async {
        ProcessTuning.apply()
        if let command = CommandLine.arguments.dropFirst().first, command == "--version" {
            print("gateway \(BuildVersion.current)")
            return
        }
        do {
            let config = try GatewayConfig.load(environment: ProcessInfo.processInfo.environment)
            let app = try buildApplication(config)
            try await app.runService()
            FileHandle.standardError.write(Data("gateway: stopped cleanly\n".utf8))
        } catch {
            FileHandle.standardError.write(Data("gateway: \(error)\n".utf8))
            exit(1)
        }
    }
}

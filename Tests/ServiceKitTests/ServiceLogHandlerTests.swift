import Foundation
import Logging
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitHTTP
import Synchronization
import Testing

/// The process log handler writes the line `StreamLogHandler` writes.
@Suite struct ServiceLogHandlerTests {
    final class Lines: Sendable {
        let all = Mutex<[String]>([])
        var logger: Logger {
            Logger(label: "social") { label in ServiceLogHandler(label: label) { line in self.all.withLock { $0.append(line) } } }
        }
    }

    @Test func aLineHasTimeLevelLabelSortedMetadataSourceAndMessage() throws {
        let lines = Lines()
        var logger = lines.logger
        logger[metadataKey: "request_id"] = "r-1"
        logger[metadataKey: "client"] = "127.0.0.1"
        logger.info("request", metadata: ["status": "200", "client": "10.0.0.7"])
        let line = try #require(lines.all.withLock { $0 }.first)
        let pattern = #/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{4} info social: client=10\.0\.0\.7 request_id=r-1 status=200 \[ServiceKitTests\] request\n$/#
        #expect(line.wholeMatch(of: pattern) != nil, "\(line)")
    }

    @Test func levelsBelowTheLoggersAreNotWrittenAndMetadataIsPerLogger() {
        let lines = Lines()
        var logger = lines.logger
        logger.logLevel = .warning
        var child = logger
        child[metadataKey: "user_id"] = "u"
        logger.info("quiet")
        logger.warning("plain")
        child.error("failed", error: CancellationError())
        let written = lines.all.withLock { $0 }
        #expect(written.count == 2)
        #expect(written.first?.hasSuffix("warning social: [ServiceKitTests] plain\n") == true)
        #expect(written.last?.contains("error social: error.message=CancellationError() error.type=Swift.CancellationError user_id=u [ServiceKitTests] failed") == true)
    }
}

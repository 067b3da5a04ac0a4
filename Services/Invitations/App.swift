import ServiceKit

@main
enum InvitationsMain {
    static func main() async {
        await ServiceLauncher.main(InvitationsService.definition)
    }
}

//! Socket address conversion.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// # Safety
/// `sa` must be null or point to a valid `sockaddr_in`/`sockaddr_in6`.
pub(crate) unsafe fn ip_from_sockaddr(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-null sockaddr per the contract; sa_family is always readable.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: the family says this is a sockaddr_in.
            let sin = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                sin.sin_addr.s_addr,
            ))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this is a sockaddr_in6.
            let sin6 = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// Like [`ip_from_sockaddr`], for a sockaddr of `len` bytes: `None` if it
/// is shorter than its family's structure.
///
/// # Safety
/// `sa` must be null or point to `len` readable bytes.
#[cfg_attr(not(ats_10), allow(dead_code))]
pub(crate) unsafe fn ip_from_sockaddr_len(
    sa: *const libc::sockaddr,
    len: std::ffi::c_int,
) -> Option<IpAddr> {
    let len = usize::try_from(len).ok()?;
    if sa.is_null() || len < std::mem::size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: at least the family's bytes are readable (checked above).
    let family = i32::from(unsafe { (*sa).sa_family });
    let need = match family {
        libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
        _ => return None,
    };
    if len < need {
        return None;
    }
    // SAFETY: a sockaddr of its family's full size.
    unsafe { ip_from_sockaddr(sa) }
}

/// True if the peer of socket `fd` has closed it (end-of-file) or it
/// failed: a non-blocking peek, which neither consumes data nor waits.
/// If ATS closed the socket and the number was reused, the answer is about
/// another connection; callers only ask about connections that are ending
/// or parked (which ATS does not close), so the cost is a wrong answer
/// about one that is ending anyway.
pub(crate) fn peer_gone(fd: std::ffi::c_int) -> bool {
    let mut byte = 0u8;
    // SAFETY: recv on a plain int with a valid 1-byte buffer.
    let n = unsafe {
        libc::recv(
            fd,
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => true,
        n if n > 0 => false,
        _ => !matches!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EAGAIN) | Some(libc::EINTR)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sockaddr_shorter_than_its_family_is_no_address() {
        // SAFETY: all-zero bytes are a valid sockaddr_in6.
        let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sin6.sin6_addr.s6_addr[15] = 1;
        let sa = std::ptr::from_ref(&sin6).cast::<libc::sockaddr>();
        let full = std::mem::size_of::<libc::sockaddr_in6>() as std::ffi::c_int;
        // SAFETY: `sa` points to `full` readable bytes.
        unsafe {
            assert_eq!(
                ip_from_sockaddr_len(sa, full),
                Some(IpAddr::V6(Ipv6Addr::LOCALHOST))
            );
            assert_eq!(ip_from_sockaddr_len(sa, full - 1), None);
            assert_eq!(ip_from_sockaddr_len(sa, 0), None);
            assert_eq!(ip_from_sockaddr_len(sa, -1), None);
            assert_eq!(ip_from_sockaddr_len(std::ptr::null(), full), None);
        }
        // SAFETY: all-zero bytes are a valid sockaddr_in.
        let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_addr.s_addr = u32::from(Ipv4Addr::new(192, 0, 2, 7)).to_be();
        let sa = std::ptr::from_ref(&sin).cast::<libc::sockaddr>();
        let len = std::mem::size_of::<libc::sockaddr_in>() as std::ffi::c_int;
        // SAFETY: `sa` points to `len` readable bytes.
        unsafe {
            assert_eq!(
                ip_from_sockaddr_len(sa, len),
                Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)))
            );
            assert_eq!(ip_from_sockaddr_len(sa, len - 1), None);
        }
    }
}

//! The glib functions behind the objects that cross the ABI: strings a
//! plugin frees with `g_free`, and the `GArray`/`GByteArray` of the
//! register and memory reads. They come from the system's libglib-2.0 (the
//! one the plugin itself links), opened at run time so that tcgkit needs
//! glib only when a C plugin is loaded.

use std::ffi::{CStr, c_char, c_uint, c_void};
use std::sync::OnceLock;

use libloading::{Library, Symbol};

use crate::QemuPluginError;

/// The shared object QEMU plugins link (Debian `libglib2.0-0`).
const GLIB: &str = "libglib-2.0.so.0";

/// `GArray` and `GByteArray`, opaque here: glib's functions handle them.
#[repr(C)]
pub(crate) struct GArrayHeader {
    _opaque: [u8; 0],
}

type StrdupFn = unsafe extern "C" fn(*const c_char) -> *mut c_char;
type ArrayNewFn = unsafe extern "C" fn(c_int, c_int, c_uint, c_uint) -> *mut GArrayHeader;
type ArrayAppendFn =
    unsafe extern "C" fn(*mut GArrayHeader, *const c_void, c_uint) -> *mut GArrayHeader;
type ByteArrayAppendFn =
    unsafe extern "C" fn(*mut GArrayHeader, *const u8, c_uint) -> *mut GArrayHeader;
type ByteArraySetSizeFn = unsafe extern "C" fn(*mut GArrayHeader, c_uint) -> *mut GArrayHeader;

use std::ffi::c_int;

/// The functions tcgkit calls.
pub(crate) struct Glib {
    strdup: StrdupFn,
    array_sized_new: ArrayNewFn,
    array_append_vals: ArrayAppendFn,
    byte_array_append: ByteArrayAppendFn,
    byte_array_set_size: ByteArraySetSizeFn,
    /// Kept open for the process's life: the function pointers above point
    /// into it, and plugins hold objects it allocated.
    _library: Library,
}

static GLIB_FUNCTIONS: OnceLock<Result<Glib, String>> = OnceLock::new();

impl Glib {
    /// The process's glib, opened on first use.
    pub(crate) fn get() -> Result<&'static Glib, QemuPluginError> {
        GLIB_FUNCTIONS
            .get_or_init(Glib::open)
            .as_ref()
            .map_err(|reason| QemuPluginError::Glib {
                reason: reason.clone(),
            })
    }

    fn open() -> Result<Glib, String> {
        // SAFETY: loading libglib runs its initialisers, which do nothing
        // but set up glib's own state; it is the library every QEMU
        // plugin links, loaded once for the process. Global binding: QEMU's
        // executable links glib, so a plugin built as QEMU's contrib
        // Makefile builds them (without -lglib) finds glib's symbols in the
        // process; here they must be made global before it is loaded.
        let library = unsafe {
            libloading::os::unix::Library::open(
                Some(GLIB),
                libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
            )
        }
        .map(Library::from)
        .map_err(|e| format!("{GLIB}: {e}"))?;
        fn find<T: Copy>(library: &Library, name: &[u8]) -> Result<T, String> {
            // SAFETY: each name below is looked up with the C type glib
            // documents for it (glib.h), so the pointer is used as what it is.
            let symbol: Symbol<'_, T> = unsafe { library.get(name) }.map_err(|e| e.to_string())?;
            Ok(*symbol)
        }
        Ok(Glib {
            strdup: find(&library, b"g_strdup\0")?,
            array_sized_new: find(&library, b"g_array_sized_new\0")?,
            array_append_vals: find(&library, b"g_array_append_vals\0")?,
            byte_array_append: find(&library, b"g_byte_array_append\0")?,
            byte_array_set_size: find(&library, b"g_byte_array_set_size\0")?,
            _library: library,
        })
    }

    /// A copy of `s` the plugin owns and frees with `g_free`.
    pub(crate) fn strdup(&self, s: &CStr) -> *mut c_char {
        // SAFETY: `s` is a valid NUL-terminated string; g_strdup copies it.
        unsafe { (self.strdup)(s.as_ptr()) }
    }

    /// A new `GArray` of `items` elements of `T`, which the plugin owns
    /// (`g_array_free`).
    pub(crate) fn array_of<T>(&self, items: &[T]) -> *mut c_void {
        let size = c_uint::try_from(std::mem::size_of::<T>()).unwrap_or(c_uint::MAX);
        let len = c_uint::try_from(items.len()).unwrap_or(c_uint::MAX);
        // SAFETY: g_array_sized_new(zero_terminated=0, clear=0, size, n)
        // makes an empty array; appending `len` elements of `size` bytes
        // reads exactly `items`.
        unsafe {
            let array = (self.array_sized_new)(0, 0, size, len);
            (self.array_append_vals)(array, items.as_ptr().cast(), len).cast()
        }
    }

    /// Appends `bytes` to the plugin's `GByteArray` at `array`.
    ///
    /// # Safety
    /// `array` must be a live `GByteArray` (or null, which does nothing).
    pub(crate) unsafe fn byte_array_append(&self, array: *mut c_void, bytes: &[u8]) {
        if array.is_null() {
            return;
        }
        let len = c_uint::try_from(bytes.len()).unwrap_or(c_uint::MAX);
        // SAFETY: the caller vouches for `array`; `bytes` is `len` bytes.
        unsafe {
            (self.byte_array_append)(array.cast(), bytes.as_ptr(), len);
        }
    }

    /// Truncates the plugin's `GByteArray` at `array` to `len` bytes.
    ///
    /// # Safety
    /// `array` must be a live `GByteArray` (or null, which does nothing).
    pub(crate) unsafe fn byte_array_truncate(&self, array: *mut c_void, len: usize) {
        if array.is_null() {
            return;
        }
        let len = c_uint::try_from(len).unwrap_or(c_uint::MAX);
        // SAFETY: the caller vouches for `array`.
        unsafe {
            (self.byte_array_set_size)(array.cast(), len);
        }
    }
}
